"""Micro-batch partitioning: the partitioner interface (``base``), its registry, metrics, Prompt
(SIGMOD'20) and the baselines it is compared with. Pure: no Spark, Flask or SQL imports."""
