"""Warning classes of the library."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped at ``max_iter`` before reaching ``tol``."""
