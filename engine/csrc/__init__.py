"""C++ and CUDA sources of the `engine._C` extension, and their build (`python -m engine.csrc.build`).

Nothing here is imported at run time: `engine.ops` loads the built module."""
