"""Graders for the book's "Your turn" exercises: each ``check_*`` prints pass or fail with a diff."""

from __future__ import annotations


def report(name: str, failures: list[str]) -> bool:
    """Print a grader's verdict: a tick, or a cross and one line per failed case. Returns the verdict."""
    if not failures:
        print(f"✓ {name}: passed")
        return True
    print(f"✗ {name}: failed")
    for line in failures:
        print("  " + line)
    return False
