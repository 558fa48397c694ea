"""Embedding-initialisation methods, one module each, behind one registry.

Each module registers its methods with :func:`embtransfer.methods.base.register`;
:func:`embtransfer.methods.base.get_method` imports the module a config name
needs (see :mod:`embtransfer.method_catalog`) and returns the method.
"""
