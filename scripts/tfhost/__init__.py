"""Host-side tools: run the benchmark images, scale over GPUs, watch the GPUs, plot records.

Everything here runs on the GPU host, outside the containers, and talks to the
Docker engine through its API (the ``docker`` Python package), never through the
``docker`` command line: errors come back as exceptions that can be turned into
one clear line, and nothing depends on the CLI's output format.

``engine``    connect to the Docker engine, with a clear error when none answers
``runner``    ``docker run`` with GPU device requests, live logs, time limit, clean-up
``monitor``   NVML sampling of every GPU once a second into a CSV beside a record
``scaling``   the 1, 2, 4 … N GPU (or CPU replica) study and its speedup figures
``plots``     matplotlib figures for scaling, GPU utilisation and CPU-vs-GPU throughput
``report``    records → figures and a Markdown table (``workloads report``)
``commands``  the ``workloads run``, ``scale`` and ``monitor`` subcommands
"""
