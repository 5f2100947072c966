"""A command line resolved into runs: the flags parsed (:mod:`.cli`), a preset or --rerun filled
in, and each configuration resolved once into a :class:`~.spec.RunSpec`."""
