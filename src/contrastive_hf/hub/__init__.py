"""What goes to the Hugging Face Hub beside the weights: model cards, and peft adapters on the encoder."""
