"""``workloads sweep``: run a parameter study of one workload over many GPUs.

psweep supplies the parameter sets (``stargrid``/``pgrid``), their hashes and the
database format (``<dir>/database.pk`` plus one ``<dir>/<pset_id>/`` per run);
this package supplies what psweep's ``run`` lacks for long GPU studies: a queue
of device slots, one fresh process per run with ``CUDA_VISIBLE_DEVICES`` set
before any framework starts, a database row written the moment a run ends
(failed runs included), resume by hash, and a lock against two sweeps in one
directory.
"""
