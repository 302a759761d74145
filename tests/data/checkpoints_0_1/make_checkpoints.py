"""Save tiny checkpoints with contrastive_hf 0.1 (commit d147472, before the move into wings), and the embeddings
they give, for tests/test_checkpoint_compatibility.py."""
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertTokenizerFast
import contrastive_hf
from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, DualEncoderConfig, DualEncoderModel

out = Path(sys.argv[1])
torch.manual_seed(0)
encoder = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
                     max_position_embeddings=32)
input_ids = torch.tensor([[2, 10, 11, 12, 3, 0], [2, 20, 21, 3, 0, 0], [2, 30, 31, 32, 33, 3]])
attention_mask = (input_ids != 0).long()
expected = {}
for name, overrides in {
    "contrastive_cls": dict(pooler_type="cls", projection_at_inference=False),
    "contrastive_mean_projected": dict(pooler_type="mean", projection_type="mlp", projection_at_inference=True),
}.items():
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, **overrides)).eval()
    model.save_pretrained(out / name)
    with torch.no_grad():
        expected[name] = model.contrastive(input_ids=input_ids, attention_mask=attention_mask).pooler_output.contiguous()
dual = DualEncoderModel(DualEncoderConfig(query_encoder=encoder, pooler_type="cls_before_pooler", similarity="dot")).eval()
dual.save_pretrained(out / "dual_encoder")
with torch.no_grad():
    expected["dual_encoder_queries"] = dual.embed_queries(input_ids, attention_mask).contiguous()
    expected["dual_encoder_passages"] = dual.embed_passages(input_ids, attention_mask).contiguous()
expected["input_ids"] = input_ids
save_file(expected, out / "expected_embeddings.safetensors")
