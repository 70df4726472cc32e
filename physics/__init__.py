"""Numerical kernels and physical processes of the Hénon Monte Carlo method.

Nothing in this package communicates or touches files: kernels take arrays and scalars.
All quantities are in Hénon (N-body) units (G = 1, initial total mass 1, initial energy -1/4)
unless a docstring says otherwise; times are in relaxation units t_NB * N0 / ln(gamma N0).
"""
