"""Moving a trained policy in and out of the trainer: export, the Hugging Face Hub, Sample Factory checkpoints."""
