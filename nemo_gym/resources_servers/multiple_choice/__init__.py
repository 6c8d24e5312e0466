"""Multiple choice: the chosen option is read from the answer in any usual form, with metrics per option position."""
