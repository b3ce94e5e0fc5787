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
#   5. TFHOST_VM_DRIVER: kvm (default) or qemu (TCG software emulation, for
#      hosts whose /dev/kvm cannot boot the guest, e.g. CI's nested PVM)
#
# check_host_devices is separate from guests: `vagrant validate` on a laptop
# must accept a config written for the GPU host, while `vagrant up` on the host
# must refuse a function that is missing or not yet handed to vfio-pci.
require "yaml"

module TfhostPlan
  PCI_ADDRESS = /\A(?:(\h{4}):)?(\h{2}):([01]\h)\.([0-7])\z/
  DEFAULTS = { "box" => "tfhost/debian12", "memory" => 16_384, "cpus" => 8, "driver" => "kvm" }.freeze
  DRIVERS = %w[kvm qemu].freeze

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

  def driver(env = ENV, root = File.expand_path("..", __dir__))
    path = config_path(env, root)
    value = env["TFHOST_VM_DRIVER"].to_s
    where = "TFHOST_VM_DRIVER"
    if value.empty?
      value = (DEFAULTS.merge(read_config(path).fetch("defaults", {}) || {}))["driver"].to_s
      where = "#{path}: defaults.driver"
    end
    return value if DRIVERS.include?(value)

    raise Error, "#{where}: '#{value}' is not a libvirt domain type; use kvm (hardware " \
                 "virtualization) or qemu (software emulation, where /dev/kvm cannot boot the guest)"
  end

  # TFHOST_ANSIBLE_VARS: a YAML file of variables for site.yml on top of vars.yml.
  def ansible_vars(env = ENV)
    path = env["TFHOST_ANSIBLE_VARS"].to_s
    return nil if path.empty?

    path = File.expand_path(path)
    raise Error, "TFHOST_ANSIBLE_VARS: #{path} does not exist; point it at a YAML file of variables" \
      unless File.file?(path)

    path
  end

  # TFHOST_APT_PROXY: the guest's apt proxy, e.g. http://192.168.121.1:3142.
  def apt_proxy(env = ENV)
    url = env["TFHOST_APT_PROXY"].to_s
    return nil if url.empty?
    raise Error, "TFHOST_APT_PROXY: '#{url}' is not an http:// URL; write it as http://HOST:PORT" \
      unless %r{\Ahttps?://[^\s/"]+/?\z}.match?(url)

    url
  end

  # Every function a guest is given must be on this host and bound to vfio-pci
  # (ansible/hypervisor.yml does that). Checked before vagrant-libvirt asks
  # libvirt for anything, so the error names the address, not a libvirt XML fault.
  def check_host_devices(guests, sysfs = "/sys")
    guests.each do |guest|
      guest.gpus.each do |pci|
        address = lspci_form(pci)
        device = File.join(sysfs, "bus", "pci", "devices", address)
        unless File.exist?(device)
          raise Error, "#{guest.name} gpus: PCI device #{address} is not on this host; fix the " \
                       "address in vagrant/gpus.yml or TFHOST_GPUS (`lspci -D` lists them)"
        end
        link = File.join(device, "driver")
        bound = File.symlink?(link) ? File.basename(File.readlink(link)) : nil
        next if bound == "vfio-pci"

        raise Error, "#{guest.name} gpus: PCI device #{address} is bound to " \
                     "#{bound ? "driver #{bound}" : 'no driver'}, not vfio-pci; run " \
                     "`ansible-playbook -i inventory hypervisor.yml` in ansible/ on this host first"
      end
    end
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
