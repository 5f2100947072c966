"""What a run asks for: the flags declared once (:mod:`.config`), parsed (:mod:`.cli`), checked and
resolved once into a :class:`~.spec.RunSpec`."""
