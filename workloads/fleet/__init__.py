"""The fleet verdict: many hosts' acceptance records against their hardware, their siblings
and their own past.

One host's figures mean little alone; beside fifty identical hosts, the one whose GPU 5
all-reduces at 60 % of the median is obvious, and so is the one with seven GPUs where the
others have eight. `workloads report --fleet DIR` reads the records `ansible/accept.yml`
gathered (one `<host>.json` per host), groups the hosts by GPU model, and names the hosts and
GPUs that lack something their group has, fall short of the datasheet (the battery's own
verdicts), of the other hosts of their group (a robust outlier test) or of their own accepted
baseline, in Markdown, a single-file HTML page, CSV and JSON. `--history` shows each host's
figures run by run.

Modules, one job each: `model` (what a fleet is made of), `load` (records to hosts),
`completeness` (missing GPUs, NVLinks, rows), `outliers` (the robust statistics),
`baselines` (each host against its accepted record), `reasons` (one cause, one line),
`verdict` (host verdicts), `history` (figures over runs), `render_*` (the outputs),
`command` (the glue the CLI calls), `synthetic` and `rates` (generated fleets for the
benchmarks and tests), `bench` (`workloads bench fleet`).
"""
