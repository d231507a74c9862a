"""The activation cache: pooled vectors on disk, written in chunks under a lock, read back one layer at a time.

    from layerscope.engine.cache.store import LayerStore
    stack = store.pooled("mean")         # a LayerStack: (n_texts, n_layers + 1, d), read one layer at a time

Holds: ``store`` (a hashed, resumable entry: create, write chunks, resume, read), ``entry`` (an entry's folder:
built complete under a lock, checked, repaired), ``journal`` (which rows were written, with checksums),
``files`` (writer threads, whole-buffer writes, block reads), ``views`` (one pooling as a layer source),
``layers`` (layer sources and stacks, from the store or from arrays).

May import: the packages below the engine (io, paths, errors); no room of the engine. Every other room may
import it.
"""
