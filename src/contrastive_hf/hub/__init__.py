"""What goes to the Hugging Face Hub beside the weights: model cards (with the card text each recipe registers for its
method), and peft adapters on the encoder."""
