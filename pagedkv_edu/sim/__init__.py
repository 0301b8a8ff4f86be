"""The book's experiments: they run the core (and the engine with a stand-in runner) and return data, no kernels.

``simulate`` (chapters 1, 2, 6, 8, 9), the contiguous arenas (chapter 1), batching and decode cost
models (chapter 6), sharing (chapter 7), block size (chapter 9), the radix tree and its
comparison (chapter 8), routing across replicas (chapter 11), the production map (chapter 10).
Importing any of it loads no Triton kernel.
"""
