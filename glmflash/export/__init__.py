"""Exports of trained checkpoints to other ecosystems (`glmflash export`)."""
