"""Instruction following: verifiable instructions in the manner of IFEval, each checked by code."""
