"""The fleet verdict: many hosts' acceptance records against their hardware and their siblings.

One host's figures mean little alone; beside fifty identical hosts, the one whose GPU 5
all-reduces at 60 % of the median is obvious. `workloads report --fleet DIR` reads the
records `ansible/accept.yml` gathered (one `<host>.json` per host), groups the hosts by
hardware, and names the hosts and GPUs that fall short of the datasheet (the battery's own
verdicts) or of their group (a robust outlier test), in Markdown, a single-file HTML page,
CSV and JSON.

Modules, one job each: `model` (what a fleet is made of), `load` (records to hosts),
`outliers` (the robust statistics), `verdict` (host verdicts and reasons), `render_*`
(the outputs), `command` (the glue the CLI calls).
"""
