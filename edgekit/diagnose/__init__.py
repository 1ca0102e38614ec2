"""What this box can do (`doctor`), what a model of a given size would do on it (`probe`), and what a bundle holds
(`inspect`)."""
