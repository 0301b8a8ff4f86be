"""Graders for the book's "Your turn" exercises: each ``check_*`` prints pass or fail with a diff."""
