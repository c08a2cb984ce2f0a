//! What torch's own `_memory_viz.py` prints (in progress).
