"""Agent skills: skills/<name>/SKILL.md."""

SKILL_FILE = "SKILL.md"  # here, not in parse.py: finding skills must not import pydantic
