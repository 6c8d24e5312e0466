"""Number-guessing game: a multi-turn environment whose rules live in `game.py`, served by `app.py` for agents."""
