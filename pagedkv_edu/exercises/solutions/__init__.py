"""Reference solutions to the "Your turn" exercises (read them after trying)."""
