"""Stored results read back, below the drivers and the writers: the registry of figures every
reader and writer takes its figures from (:mod:`.figures`), the published schema
(:mod:`.schema`), the one reader of result files (:mod:`.stored`), the baselines a run is measured
against (:mod:`.baseline`: ``--compare``'s gate, ``--scaling-baseline``), and the model of a stored
result every reader shares (:mod:`.entry`, gathered by :mod:`.collection`)."""
