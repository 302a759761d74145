"""Decoder LLMs as encoders, on tiny decoders built in code: pooled by their last token (the `last_token` pooler
against sentence-transformers' ``lasttoken`` Pooling on the same weights, with the tokenizer padding on the right and
on the left, for each family that rotates its positions: Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 1-3), and
attending both ways (``bidirectional_attention``, for every family of `BIDIRECTIONAL_DECODERS`, kept by the saved
checkpoint); the end-of-sequence rule, prompts, E5-style instruction tuning and the dual encoder on a tiny Qwen2.

The tokenizer is a word-level one trained here on the repository's Wikipedia sample, with an end-of-sequence and a
padding token and no [CLS]/[SEP], as decoder tokenizers are.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModel,
    AutoTokenizer,
    BertConfig,
    OPTConfig,
    PreTrainedTokenizerFast,
)

from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.models.configuration_contrastive import BIDIRECTIONAL_DECODERS
from contrastive_hf.models.encoding_policy import EncodingPolicy
from contrastive_hf.models.packing import PACKABLE_DECODER_MODEL_TYPES

from conftest import DEMO_DATA, REPO_ROOT
from helpers.decoders import DECODERS, OTHER_DECODERS, decoder_config, qwen2_tokenizer, save_tiny_qwen2
from helpers.in_process import run_script

SENTENCES = [
    "A man is playing a guitar.",
    "The cat sleeps.",
    "Stocks fell sharply on Monday after the report was published.",
    "Rain.",
]


@pytest.fixture(scope="module")
def decoder_tokenizer() -> PreTrainedTokenizerFast:
    words = Tokenizer(models.WordLevel(unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=4000, special_tokens=["<pad>", "<unk>", "</s>"])
    words.train_from_iterator((DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", unk_token="<unk>", eos_token="</s>")


def decoder_model(family: str, vocab_size: int, pooler_type="last_token", **settings) -> ContrastiveModel:
    torch.manual_seed(0)
    encoder = decoder_config(family, vocab_size)
    config = ContrastiveConfig(encoder=encoder, pooler_type=pooler_type, projection_type="none", **settings)
    return ContrastiveModel(config).eval()


@pytest.mark.parametrize("family", [*DECODERS, "gemma", "gemma2", "gemma3_text"])  # GPT-2: below
def test_last_token_pooling_of_a_decoder_is_sentence_transformers_lasttoken_with_either_padding_side(
    family, decoder_tokenizer, tmp_path
):
    model = decoder_model(family, len(decoder_tokenizer))
    embeddings = {}
    for side in ("right", "left"):
        decoder_tokenizer.padding_side = side
        batch = decoder_tokenizer(SENTENCES, padding=True, return_tensors="pt")
        assert (batch["attention_mask"][:, 0 if side == "left" else -1] == 0).any()  # padded on that side
        with torch.no_grad():
            embeddings[side] = model(**batch).pooler_output.numpy()
        # each sentence's vector is its last real token's state, wherever the padding is
        with torch.no_grad():
            states = model.encoder(**batch).last_hidden_state
        last = [row.nonzero()[-1, 0] for row in batch["attention_mask"]]
        np.testing.assert_allclose(
            embeddings[side], torch.stack([s[i] for s, i in zip(states, last, strict=True)]).numpy()
        )
    # rotary positions: a left-padded sentence is the right-padded one shifted, which attention does not see
    np.testing.assert_allclose(embeddings["left"], embeddings["right"], rtol=0, atol=1e-5)

    decoder_tokenizer.padding_side = "right"
    model.save_pretrained(tmp_path)
    decoder_tokenizer.save_pretrained(tmp_path)
    served = SentenceTransformer(str(tmp_path), device="cpu")
    assert served[1].pooling_mode == "lasttoken"
    reloaded = ContrastiveModel.from_pretrained(tmp_path)
    assert reloaded.config.pooler_type == "last_token"
    # both read the folder's tokenizer (for a qwen2 folder transformers picks Qwen2Tokenizer, which cuts otherwise)
    np.testing.assert_allclose(served.encode(SENTENCES), reloaded.encode(SENTENCES), rtol=0, atol=1e-5)
    mine = reloaded.encode(SENTENCES, tokenizer=decoder_tokenizer)
    np.testing.assert_allclose(mine, embeddings["right"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("pooler_type", ["last_token", "mean"])
def test_a_decoder_with_absolute_positions_embeds_left_padded_texts_as_it_embeds_each_text_alone(
    pooler_type, decoder_tokenizer, tmp_path
):
    """GPT-2 reads learned positions at each token's index: left padding would move every real token (a 2.6
    difference on this tiny GPT-2); its positions are counted from the attention mask, so either padding side gives
    each text's own embedding, in the model's forward and in `encode`; sentence-transformers, which pads on the
    right, serves the same."""
    model = decoder_model("gpt2", len(decoder_tokenizer), pooler_type=pooler_type)
    with torch.no_grad():
        alone = torch.cat(
            [model(**decoder_tokenizer([text], return_tensors="pt")).pooler_output for text in SENTENCES]
        )
        for side in ("left", "right"):
            decoder_tokenizer.padding_side = side
            batch = decoder_tokenizer(SENTENCES, padding=True, return_tensors="pt")
            torch.testing.assert_close(model(**batch).pooler_output, alone, rtol=0, atol=1e-5)
            encoded = model.encode(SENTENCES, tokenizer=decoder_tokenizer, convert_to_tensor=True)
            torch.testing.assert_close(encoded, alone, rtol=0, atol=1e-5)
    decoder_tokenizer.padding_side = "right"
    model.save_pretrained(tmp_path)
    decoder_tokenizer.save_pretrained(tmp_path)
    served = SentenceTransformer(str(tmp_path), device="cpu")
    np.testing.assert_allclose(served.encode(SENTENCES), alone.numpy(), rtol=0, atol=1e-5)


PACKED_DECODERS = [family for family in {**DECODERS, **OTHER_DECODERS} if family in PACKABLE_DECODER_MODEL_TYPES]


@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("family", PACKED_DECODERS)
def test_a_packed_decoder_batch_embeds_and_trains_as_its_padded_pass(family, bidirectional, decoder_tokenizer):
    """Packed (``sub_batch_size="packed"``): one sequence of the batch's real tokens, positions restarting at each
    text, attention inside each text and causal unless bidirectional, grouped-query heads shared: the embeddings and
    gradients of the padded pass, with each kernel that runs on a CPU."""
    decoder_tokenizer.padding_side = "right"
    batch = decoder_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    for pooler_type in ("last_token", "mean"):
        model = decoder_model(family, len(decoder_tokenizer), pooler_type, bidirectional_attention=bidirectional)
        outputs = {}
        for name, policy in {
            "padded": EncodingPolicy(0),
            "grouped": EncodingPolicy("packed", packed_attention_kernel="grouped"),
            "reference": EncodingPolicy("packed", packed_attention_kernel="reference"),
        }.items():
            model.zero_grad()
            embeddings = policy.embed(model.encoder, model.pooler, None, batch["input_ids"], batch["attention_mask"])
            (embeddings * torch.linspace(-1, 1, embeddings.numel()).view_as(embeddings)).sum().backward()
            grads = {key: p.grad.clone() for key, p in model.named_parameters() if p.grad is not None}
            outputs[name] = (embeddings.detach(), grads)
        for name in ("grouped", "reference"):
            message = f"{family} {pooler_type} {name}"
            torch.testing.assert_close(outputs[name][0], outputs["padded"][0], rtol=0, atol=1e-5, msg=message)
            for key, grad in outputs["padded"][1].items():  # float32 rounding, to the gradient's scale (Gemma's: 89)
                scale = max(1.0, grad.abs().max().item())
                torch.testing.assert_close(
                    outputs[name][1][key], grad, rtol=1e-4, atol=1e-5 * scale, msg=f"{message} {key}"
                )


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("family", [*DECODERS, *OTHER_DECODERS])
def test_a_ready_mask_gives_a_decoder_the_states_of_transformers_own_mask(
    family, bidirectional, padding_side, decoder_tokenizer
):
    """With each text's length on the host, a padded batch's mask is built on the device (`attention_mask_for`), so
    that transformers does not read the 2D mask back (a host sync at each forward pass, on a GPU): every real
    token's state equals the one transformers' own mask gives, causal and both ways, padded on either side."""
    from contrastive_hf.models.encoding_policy import attention_mask_for, encoder_inputs

    tokenizer = copy.deepcopy(decoder_tokenizer)  # padding on the left leaves its mark in the shared one's backend
    tokenizer.padding_side = padding_side
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    lengths = batch["attention_mask"].sum(-1).numpy()
    model = decoder_model(family, len(tokenizer), "mean", bidirectional_attention=bidirectional)
    inputs = encoder_inputs(model.encoder, batch["input_ids"], batch["attention_mask"])
    ready = attention_mask_for(model.encoder, inputs["attention_mask"], lengths)
    sdpa = model.encoder.config._attn_implementation == "sdpa"
    assert ready.dim() == (4 if sdpa else 2), (family, model.encoder.config._attn_implementation)
    with torch.no_grad():
        theirs = model.encoder(**inputs).last_hidden_state
        ours = model.encoder(**{**inputs, "attention_mask": ready}).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], theirs[real], rtol=0, atol=1e-5)


def test_a_batch_longer_than_a_sliding_window_keeps_transformers_own_masks(decoder_tokenizer):
    """One ready mask would serve the full and the sliding-window layers alike: past the window, the 2D mask."""
    from contrastive_hf.models.encoding_policy import attention_mask_for

    batch = decoder_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    lengths = batch["attention_mask"].sum(-1).numpy()
    model = decoder_model("mistral", len(decoder_tokenizer), "mean")
    model.encoder.config.sliding_window = batch["input_ids"].shape[1] - 1
    assert attention_mask_for(model.encoder, batch["attention_mask"], lengths).dim() == 2
    model.encoder.config.sliding_window = batch["input_ids"].shape[1]
    assert attention_mask_for(model.encoder, batch["attention_mask"], lengths).dim() == 4


def test_auto_leaves_decoders_unpacked_and_packing_is_refused_where_the_kernels_cannot_follow(decoder_tokenizer):
    """``"auto"`` packs encoders only (the gain on decoders is not measured on a GPU): a decoder takes the
    length-sorted groups on a CPU, saying why; Gemma 2 soft-caps its attention scores, which the packed kernels do
    not, and is refused when packing is asked for."""
    model = decoder_model("qwen2", len(decoder_tokenizer))
    assert EncodingPolicy("auto").path(model.encoder, torch.device("cpu")) == "sorted"
    assert EncodingPolicy("packed").path(model.encoder, torch.device("cpu")) == "packed"
    gemma2 = decoder_model("gemma2", len(decoder_tokenizer))
    with pytest.raises(ValueError, match="sub_batch_size='packed' cannot run: packing is implemented and tested"):
        EncodingPolicy("packed").path(gemma2.encoder, torch.device("cpu"))


def first_token_states(model, input_ids: list[list[int]]) -> torch.Tensor:
    """The encoder's last-layer state of each row's first token (``model``: a `ContrastiveModel` or an encoder)."""
    encoder = model.encoder if isinstance(model, ContrastiveModel) else model
    with torch.no_grad():
        return encoder(input_ids=torch.tensor(input_ids)).last_hidden_state[:, 0]


def test_every_family_said_to_attend_both_ways_is_tested():
    assert set(BIDIRECTIONAL_DECODERS) == set(DECODERS) | set(OTHER_DECODERS)


@pytest.mark.parametrize("family", [*DECODERS, *OTHER_DECODERS])
def test_bidirectional_attention_makes_a_decoder_attend_both_ways_and_its_checkpoint_keeps_it(
    family, decoder_tokenizer, tmp_path
):
    """Causal, the first token's state ignores the tokens after it; bidirectional, it reads them. The setting is the
    encoder config's is_causal, so AutoModel and sentence-transformers reload it as it trained."""
    vocab = len(decoder_tokenizer)
    ids, changed_end = [[5, 6, 7, 8]], [[5, 6, 7, 9]]
    causal = decoder_model(family, vocab, pooler_type="mean")
    assert not causal.config.bidirectional_attention
    torch.testing.assert_close(first_token_states(causal, ids), first_token_states(causal, changed_end))
    model = decoder_model(family, vocab, pooler_type="mean", bidirectional_attention=True)
    assert model.config.bidirectional_attention and model.encoder.config.is_causal is False
    assert not torch.allclose(first_token_states(model, ids), first_token_states(model, changed_end))

    model.save_pretrained(tmp_path)
    decoder_tokenizer.save_pretrained(tmp_path)
    encoder = AutoModel.from_pretrained(tmp_path).eval()
    assert encoder.config.is_causal is False
    torch.testing.assert_close(first_token_states(encoder, ids), first_token_states(model, ids))
    reloaded = ContrastiveModel.from_pretrained(tmp_path)
    assert reloaded.config.bidirectional_attention
    served = SentenceTransformer(str(tmp_path), device="cpu")
    np.testing.assert_allclose(served.encode(SENTENCES), reloaded.encode(SENTENCES), rtol=0, atol=1e-5)
    # a causal checkpoint made bidirectional when loaded, as --bidirectional_attention does
    causal.save_pretrained(tmp_path / "causal")
    made = ContrastiveModel.from_pretrained(tmp_path / "causal", bidirectional_attention=True)
    torch.testing.assert_close(first_token_states(made, ids), first_token_states(model, ids))


def test_bidirectional_attention_is_refused_where_masks_ignore_it_and_kept_by_encoders_that_have_it():
    with pytest.raises(ValueError, match="encoder of type 'opt': its attention is causal.*supported for llama"):
        ContrastiveConfig(encoder=OPTConfig(), pooler_type="mean", bidirectional_attention=True)
    bert = ContrastiveConfig(encoder=BertConfig(), bidirectional_attention=True)
    assert bert.bidirectional_attention  # BERT attends both ways already: nothing to change


@pytest.fixture(scope="module")
def pretrained_qwen2(decoder_tokenizer, tmp_path_factory):
    """A tiny Qwen2 saved with the decoder tokenizer, as a pretrained decoder's folder."""
    folder = tmp_path_factory.mktemp("qwen2")
    torch.manual_seed(0)
    AutoModel.from_config(decoder_config("qwen2", len(decoder_tokenizer))).save_pretrained(folder)
    decoder_tokenizer.save_pretrained(folder)
    return folder


def script_arguments(start, output_dir, *extra) -> list[str]:
    return [
        "--model_name_or_path", str(start), "--train_file", str(DEMO_DATA / "wiki1m_sample.txt"),
        "--max_train_samples", "16", "--per_device_train_batch_size", "8", "--max_steps", "2",
        "--max_seq_length", "32", "--output_dir", str(output_dir), "--use_cpu", "true", "--report_to", "none", *extra,
    ]  # fmt: skip


def test_run_simcse_trains_a_decoder_with_bidirectional_attention_from_the_command_line(pretrained_qwen2, tmp_path):
    run_script(
        REPO_ROOT / "examples" / "run_simcse.py",
        ["--mode", "unsup", *script_arguments(pretrained_qwen2, tmp_path / "out", "--pooler_type", "last_token",
                                              "--bidirectional_attention", "true")],
    )  # fmt: skip
    assert AutoModel.from_pretrained(tmp_path / "out").config.is_causal is False
    trained = ContrastiveModel.from_pretrained(tmp_path / "out")
    assert trained.config.bidirectional_attention and trained.config.pooler_type == "last_token"
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| Encoder | qwen2, 2 layers, hidden size 32, vocabulary 4000, attending both ways |" in card


@pytest.mark.slow  # a whole script run (in this process): 1 s of CPU
def test_run_clear_on_a_decoder_says_that_mlm_needs_a_mask_token_or_trains_without_it(pretrained_qwen2, tmp_path):
    """CLEAR's MLM reads a mask token that decoder tokenizers lack: one usage line (it was a traceback); with
    --mlm_weight 0, CLEAR's contrastive half trains the decoder on word-deletion views."""
    refused = run_script(
        REPO_ROOT / "examples" / "run_clear.py",
        script_arguments(pretrained_qwen2, tmp_path / "mlm", "--pooler_type", "last_token"),
        check=False,
    )
    assert refused.returncode == 2
    assert "run_clear.py: error: MLM is on but" in refused.stderr and "--mlm_weight 0" in refused.stderr
    assert "Traceback" not in refused.output
    run_script(
        REPO_ROOT / "examples" / "run_clear.py",
        script_arguments(pretrained_qwen2, tmp_path / "cl", "--mlm_weight", "0", "--pooler_type", "last_token"),
    )
    assert ContrastiveModel.from_pretrained(tmp_path / "cl").config.mlm_weight == 0
    assert "vocabulary 4001, causal attention |" in (tmp_path / "cl" / "README.md").read_text()  # and [DEL]


# --- the end-of-sequence rule of last-token pooling (models/end_of_sequence.py) -----------------------------------


def test_a_last_token_model_trains_on_texts_ending_with_eos_and_its_saved_tokenizer_appends_it_everywhere(tmp_path):
    """Qwen2's tokenizer appends no EOS; ContrastiveTrainer makes it (once, said in the log), the collator's batches
    end with it, and the saved tokenizer does it in AutoTokenizer and sentence-transformers, which then embed as
    contrastive_hf does."""
    from datasets import Dataset

    from contrastive_hf import ContrastiveForPreTraining
    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    tokenizer = qwen2_tokenizer()
    eos = tokenizer.eos_token_id
    assert tokenizer("A man is playing a guitar.")["input_ids"][-1] != eos
    torch.manual_seed(0)
    config = ContrastiveConfig(encoder=decoder_config("qwen2", len(tokenizer)), pooler_type="last_token",
                               projection_type="none", mlm_weight=0.0, contrastive_loss="info_nce")  # fmt: skip
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=32)
    arguments = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, report_to="none", use_cpu=True,
        save_strategy="no",
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=ContrastiveForPreTraining(config), args=arguments, data_collator=collator, processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"text": SENTENCES}),
    )  # fmt: skip
    assert tokenizer("A man is playing a guitar.")["input_ids"][-1] == eos
    batch = collator([{"text": text} for text in SENTENCES])
    lengths = batch["attention_mask"][:, 0].sum(dim=1)
    assert all(int(row[length - 1]) == eos for row, length in zip(batch["input_ids"][:, 0], lengths, strict=True))
    trainer.train()
    trainer.save_model()

    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert (
        reloaded("Rain.")["input_ids"] == tokenizer("Rain.")["input_ids"] and reloaded("Rain.")["input_ids"][-1] == eos
    )
    served = SentenceTransformer(str(tmp_path), device="cpu")
    assert served.tokenize(["Rain."])["input_ids"][0, -1] == eos
    mine = ContrastiveModel.from_pretrained(tmp_path).encode(SENTENCES)
    np.testing.assert_allclose(served.encode(SENTENCES), mine, rtol=0, atol=1e-5)


def test_the_eos_rule_keeps_a_beginning_token_leaves_bert_alone_and_refuses_what_cannot_follow_it(decoder_tokenizer):
    from tokenizers import processors

    from contrastive_hf.models.end_of_sequence import append_eos_token

    words = Tokenizer.from_str(decoder_tokenizer.backend_tokenizer.to_str())
    words.add_special_tokens(["<s>"])
    words.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", words.token_to_id("<s>"))]
    )
    llama_like = PreTrainedTokenizerFast(tokenizer_object=words, eos_token="</s>", bos_token="<s>", pad_token="<pad>")
    before = llama_like("the cat")["input_ids"]
    assert before[0] == llama_like.bos_token_id and before[-1] != llama_like.eos_token_id
    assert append_eos_token(llama_like)
    assert llama_like("the cat")["input_ids"] == [*before, llama_like.eos_token_id]
    assert not append_eos_token(llama_like)  # once

    bert = AutoTokenizer.from_pretrained(REPO_ROOT / "examples" / "demo" / "tokenizer")
    ids = bert("the cat")["input_ids"]
    assert not append_eos_token(bert) and bert("the cat")["input_ids"] == ids  # [SEP] already ends every text

    no_eos = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(decoder_tokenizer.backend_tokenizer.to_str()),
                                     pad_token="<pad>")  # fmt: skip
    with pytest.raises(ValueError, match=r"has no eos_token to append: set one \(tokenizer.eos_token = "):
        append_eos_token(no_eos)


@pytest.mark.parametrize("pooler_type", ["mean", "last_token"])
def test_a_decoder_s_prompt_left_out_of_the_pooling_is_sentence_transformers_and_counts_no_cls(pooler_type, tmp_path):
    """A decoder tokenizer has no [CLS]/[SEP]: the prompt's tokens are its own (no leading special token), the
    eos_token the rule appends ends the text, and mean pooling without the prompt, or the last token, is
    sentence-transformers' on the saved folder (its Pooling with include_prompt=False)."""
    from contrastive_hf.models.end_of_sequence import append_eos_token
    from contrastive_hf.models.prompts import prompt_token_count

    tokenizer = qwen2_tokenizer()
    append_eos_token(tokenizer)
    prompt = "Instruct: Given a sentence, retrieve a paraphrase\nQuery: "
    assert prompt_token_count(tokenizer, prompt) == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    model = decoder_model("qwen2", len(tokenizer), pooler_type=pooler_type, prompts={"query": prompt},
                          include_prompt=False)  # fmt: skip
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    served = SentenceTransformer(str(tmp_path), device="cpu")
    assert served[1].include_prompt is False
    np.testing.assert_allclose(
        served.encode(SENTENCES, prompt_name="query"),
        ContrastiveModel.from_pretrained(tmp_path).encode(SENTENCES, prompt_name="query"),
        rtol=0,
        atol=1e-5,
    )
    without_prompt = model.encode(SENTENCES, tokenizer=tokenizer)
    with_prompt = model.encode(SENTENCES, tokenizer=tokenizer, prompt_name="query")
    assert not np.allclose(without_prompt, with_prompt, atol=1e-3)  # the text attends to the prompt before it


@pytest.mark.slow  # a whole script run (in this process): 1 s of CPU
def test_e5_style_instruction_tuning_of_a_decoder_runs_as_its_page_says(tmp_path):
    """docs/recipes/e5-instruct.md's settings (examples/llm/e5_instruct.json) on a tiny Qwen2 with its own kind of
    tokenizer: LoRA on every projection, last-token pooling on the appended EOS, the instruction on the queries only;
    the merged checkpoint serves the same query embeddings in sentence-transformers, its prompt included."""
    folder = save_tiny_qwen2(tmp_path / "qwen2")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    settings = json.loads((REPO_ROOT / "examples" / "llm" / "e5_instruct.json").read_text())
    run = run_script(
        REPO_ROOT / "examples" / "run_simcse.py",
        [REPO_ROOT / "examples" / "llm" / "e5_instruct.json", "--model_name_or_path", folder,
         "--train_file", DEMO_DATA / "nli_sample.csv", "--max_train_samples", "16", "--per_device_train_batch_size",
         "8", "--max_steps", "2", "--max_seq_length", "48", "--warmup_steps", "0", "--output_dir", tmp_path / "out",
         "--use_cpu", "true"],
    )  # fmt: skip
    assert "Training a LoRA adapter" in run.output and "appends its eos_token" in run.output
    merged = tmp_path / "out-merged"
    trained = ContrastiveModel.from_pretrained(merged)
    assert trained.config.pooler_type == "last_token" and trained.config.temperature == 0.02
    assert trained.config.prompts == {"query": settings["query_prompt"]}
    served = SentenceTransformer(str(merged), device="cpu")
    assert served.tokenize(["Rain."])["input_ids"][0, -1] == tokenizer.eos_token_id
    queries = ["A man is playing a guitar.", "Rain."]
    np.testing.assert_allclose(
        served.encode(queries, prompt_name="query"), trained.encode_query(queries), rtol=0, atol=1e-5
    )
    assert "LORA adapter (r=16, alpha=32) on down_proj, gate_proj" in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.slow  # two bf16 steps of a tiny decoder, emulated on a CPU without bf16 units: seconds
def test_e5_style_instruction_tuning_on_a_bf16_base_trains_a_float32_adapter_and_saves_a_bf16_merged_model(tmp_path):
    """The E5 recipe as a GPU runs it at scale (``--lora_base_dtype bfloat16 --bf16 true``, eager attention asked):
    the frozen base in bf16, the adapter saved in float32, the merged model in bf16, which the script's reload check
    and sentence-transformers serve (bf16 rounding)."""
    folder = save_tiny_qwen2(tmp_path / "qwen2")
    run = run_script(
        REPO_ROOT / "examples" / "run_simcse.py",
        [REPO_ROOT / "examples" / "llm" / "e5_instruct.json", "--model_name_or_path", folder,
         "--train_file", DEMO_DATA / "nli_sample.csv", "--max_train_samples", "16", "--per_device_train_batch_size",
         "8", "--max_steps", "2", "--max_seq_length", "48", "--warmup_steps", "0", "--output_dir", tmp_path / "out",
         "--use_cpu", "true", "--bf16", "true", "--lora_base_dtype", "bfloat16", "--attn_implementation", "eager"],
    )  # fmt: skip
    assert "SentenceTransformer reload of" in run.output
    adapter = load_file(tmp_path / "out" / "adapter_model.safetensors")
    assert {tensor.dtype for tensor in adapter.values()} == {torch.float32}
    merged = load_file(tmp_path / "out-merged" / "model.safetensors")
    assert {tensor.dtype for tensor in merged.values()} == {torch.bfloat16}
    trained = ContrastiveModel.from_pretrained(tmp_path / "out-merged", dtype=torch.float32)
    served = SentenceTransformer(str(tmp_path / "out-merged"), device="cpu", model_kwargs={"dtype": torch.float32})
    queries = ["A man is playing a guitar.", "Rain."]
    np.testing.assert_allclose(
        served.encode(queries, prompt_name="query"), trained.encode_query(queries), rtol=0, atol=1e-5
    )


@pytest.mark.slow  # a dual encoder's training run, saved and served: 1 s of CPU each
@pytest.mark.parametrize("share_encoders", [True, False])
def test_a_decoder_dual_encoder_trains_with_last_token_pooling_and_serves_both_towers(share_encoders, tmp_path):
    """run_dpr.py on a tiny Qwen2 (one tower or two), last-token pooling on the appended EOS and an instruction on
    the queries: sentence-transformers serves the queries and the passages as the dual encoder embeds them."""
    from contrastive_hf import DualEncoderModel

    folder = save_tiny_qwen2(tmp_path / "qwen2")
    run_script(
        "run_dpr",
        ["--model_name_or_path", folder, "--train_file", DEMO_DATA / "nli_sample.csv", "--pooler_type", "last_token",
         "--similarity", "cosine", "--temperature", "0.02", "--query_prompt", "Instruct: retrieve one\nQuery: ",
         "--share_encoders", str(share_encoders).lower(), "--max_steps", "2", "--per_device_train_batch_size", "8",
         "--eval_size", "16", "--output_dir", tmp_path / "out", "--use_cpu", "true", "--report_to", "none"],
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer("Rain.")["input_ids"][-1] == tokenizer.eos_token_id
    trained = DualEncoderModel.from_pretrained(tmp_path / "out")
    assert trained.config.pooler_type == "last_token" and trained.config.share_encoders is share_encoders
    served = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    np.testing.assert_allclose(served.encode_query(SENTENCES), trained.encode_query(SENTENCES), rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        served.encode_document(SENTENCES), trained.encode_document(SENTENCES), rtol=0, atol=1e-5
    )
