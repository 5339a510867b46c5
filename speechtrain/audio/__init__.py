"""Signal processing below the data layer (no model code): pitch (f0) extraction and pitch helpers."""
