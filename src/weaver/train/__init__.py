"""Training side of weaver: prompt data, target regeneration, drafter and Weaver trainers."""
