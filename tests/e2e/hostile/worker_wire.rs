//! M1-M3, L5-L8: forged worker frames, endless worker output, bursts of nested calls, the worker environment and descriptors.
