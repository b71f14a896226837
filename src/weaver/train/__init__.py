"""Training: data, regeneration and the drafter and adapter trainers."""
