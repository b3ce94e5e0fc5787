# Print, as JSON, what Vagrant itself makes of the repository's Vagrantfile:
# for each guest, the vagrant-libvirt settings and the Ansible provisioner.
#
# Why through Vagrant and not by reading the file: this is the configuration
# `vagrant up` would hand to libvirt (PCI host devices, CPU mode, kvm_hidden),
# after vagrant/plan.rb and every environment override have been applied.
# Nothing connects to libvirt; run from the repository root.
require "json"
require "vagrant"

env = Vagrant::Environment.new(cwd: Dir.pwd)
guests = env.machine_names.map do |name|
  machine = env.machine(name, :libvirt)
  libvirt = machine.provider_config
  provisioners = machine.config.vm.provisioners
  ansible = provisioners.find { |p| p.type == :ansible }
  {
    name: name.to_s, box: machine.config.vm.box, hostname: machine.config.vm.hostname,
    driver: libvirt.driver, memory: libvirt.memory, cpus: libvirt.cpus, cpu_mode: libvirt.cpu_mode,
    kvm_hidden: libvirt.kvm_hidden, machine_type: libvirt.machine_type,
    pcis: libvirt.pcis.map { |pci| pci.reject { |_, value| value.nil? } },
    playbook: ansible&.config&.playbook, groups: ansible&.config&.groups,
    raw_arguments: ansible&.config&.raw_arguments,
    raw_ssh_args: ansible&.config&.raw_ssh_args,
    provisioners: provisioners.map { |p| p.type.to_s },
    shell_env: provisioners.select { |p| p.type == :shell }.map { |p| p.config.env }
  }
end
puts JSON.generate(guests)
