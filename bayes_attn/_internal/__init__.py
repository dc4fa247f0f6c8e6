"""The package's plumbing, apart from the science: argument and input checks (``checks``, ``arguments``,
``spec_types``), result files and output folders (``io``, ``outputs``, ``fingerprints``), precision and thread
contexts (``precision``, ``threads``), the compilation cache, Ctrl-C handling and Markdown tables. Internal: no
name here is part of the public API, and any may change without notice."""
