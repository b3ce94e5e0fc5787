# Which guests the Vagrantfile defines, with which GPUs, memory and CPUs.
#
# Why a file of its own: the rules (config file, environment overrides, PCI
# address parsing) are what can go wrong, so they are plain Ruby that the
# tests run without Vagrant, and the Vagrantfile only maps the result onto
# vagrant-libvirt options.
#
# Sources, later wins:
#   1. defaults: one guest "tfhost-gpu1", 16 GiB, 8 vCPUs, no GPU
#   2. the YAML file in TFHOST_VAGRANT_CONFIG, or vagrant/gpus.yml if it exists
#      (format: vagrant/gpus.example.yml)
#   3. TFHOST_VM_MEMORY (MiB) and TFHOST_VM_CPUS for every guest
#   4. TFHOST_GPUS: "0000:65:00.0,0000:65:00.1" gives the first guest these
#      functions; "gpu1=0000:18:00.0;gpu2=0000:3b:00.0" assigns per guest name
require "yaml"

module TfhostPlan
  PCI_ADDRESS = /\A(?:(\h{4}):)?(\h{2}):([01]\h)\.([0-7])\z/
  DEFAULTS = { "box" => "tfhost/debian12", "memory" => 16_384, "cpus" => 8 }.freeze

  # A configuration mistake: the message names the value and the fix.
  class Error < StandardError; end

  Guest = Struct.new(:name, :memory, :cpus, :gpus, keyword_init: true)

  module_function

  # "0000:65:00.0" or "65:00.0" -> {domain: "0x0000", bus: "0x65", slot: "0x00", function: "0x0"}
  def parse_pci(address, where)
    match = PCI_ADDRESS.match(address.to_s.strip.downcase)
    unless match
      raise Error, "#{where}: '#{address}' is not a PCI address; write it as `lspci -D` prints " \
                   "it, e.g. 0000:65:00.0"
    end
    domain, bus, slot, function = match.captures
    { domain: "0x#{domain || '0000'}", bus: "0x#{bus}", slot: "0x#{slot}", function: "0x#{function}" }
  end

  # {domain: "0x0000", bus: "0x65", ...} -> "0000:65:00.0", as lspci -D prints it
  def lspci_form(pci)
    domain, bus, slot, function = pci.values_at(:domain, :bus, :slot, :function).map { |v| v.delete_prefix("0x") }
    "#{domain}:#{bus}:#{slot}.#{function}"
  end

  def positive_integer(value, where)
    number = Integer(value.to_s, 10)
    raise ArgumentError if number <= 0

    number
  rescue ArgumentError
    raise Error, "#{where}: '#{value}' is not a positive whole number"
  end

  def config_path(env, root)
    return env["TFHOST_VAGRANT_CONFIG"] if env["TFHOST_VAGRANT_CONFIG"].to_s != ""

    default = File.join(root, "vagrant", "gpus.yml")
    File.exist?(default) ? default : nil
  end

  def read_config(path)
    return {} if path.nil?
    raise Error, "TFHOST_VAGRANT_CONFIG: #{path} does not exist" unless File.exist?(path)

    data = YAML.safe_load(File.read(path)) || {}
    raise Error, "#{path}: expected a mapping with a 'guests' list" unless data.is_a?(Hash)

    data
  rescue Psych::SyntaxError => e
    raise Error, "#{path} is not valid YAML: #{e.message}"
  end

  # The TFHOST_GPUS variable as {guest name or nil => [addresses]}.
  def gpus_from_env(value)
    return {} if value.to_s.strip.empty?
    return { nil => value.split(",").map(&:strip) } unless value.include?("=")

    value.split(";").each_with_object({}) do |part, assignment|
      name, addresses = part.split("=", 2).map(&:strip)
      raise Error, "TFHOST_GPUS: '#{part}' needs the form NAME=ADDRESS[,ADDRESS]" if name.to_s.empty?

      assignment[name] = addresses.to_s.split(",").map(&:strip)
    end
  end

  def guests(env = ENV, root = File.expand_path("..", __dir__))
    path = config_path(env, root)
    config = read_config(path)
    where = path || "defaults"
    defaults = DEFAULTS.merge(config.fetch("defaults", {}) || {})
    entries = config.fetch("guests", nil) || [{ "name" => "tfhost-gpu1" }]
    raise Error, "#{where}: 'guests' must be a list" unless entries.is_a?(Array)

    env_gpus = gpus_from_env(env["TFHOST_GPUS"])
    names = entries.map { |entry| entry["name"].to_s }
    unknown = env_gpus.keys.compact - names
    raise Error, "TFHOST_GPUS names #{unknown.join(', ')}, but the guests are #{names.join(', ')}" \
      unless unknown.empty?

    guests = entries.each_with_index.map do |entry, index|
      name = entry["name"].to_s
      raise Error, "#{where}: guest #{index + 1} has no name" if name.empty?

      memory = env["TFHOST_VM_MEMORY"] || entry.fetch("memory", defaults["memory"])
      cpus = env["TFHOST_VM_CPUS"] || entry.fetch("cpus", defaults["cpus"])
      addresses = env_gpus.fetch(name) { index.zero? && env_gpus.key?(nil) ? env_gpus[nil] : entry.fetch("gpus", []) }
      Guest.new(
        name: name,
        memory: positive_integer(memory, "#{name} memory (MiB)"),
        cpus: positive_integer(cpus, "#{name} cpus"),
        gpus: Array(addresses).map { |address| parse_pci(address, "#{name} gpus") }
      )
    end
    taken = guests.flat_map(&:gpus).group_by(&:itself).select { |_, uses| uses.size > 1 }.keys
    raise Error, "#{taken.map { |pci| lspci_form(pci) }.join(', ')} is given to more than one guest; " \
                 "a PCI function can be passed to one guest only" unless taken.empty?

    guests
  end

  def box(env = ENV, root = File.expand_path("..", __dir__))
    env["TFHOST_VAGRANT_BOX"] || DEFAULTS.merge(read_config(config_path(env, root)))["box"]
  end
end
