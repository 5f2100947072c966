"""What a run asks for, declared once: each setting's schema and the frozen configuration
(:mod:`.config`), precision modes, compile options, model options, argument types and the
identity of a configuration. Parsed and resolved one layer up, in :mod:`microbench.plan`."""
