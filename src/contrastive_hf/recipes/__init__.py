"""One module per paper: its defaults, its views or data, its loss and trainer where it has its own.

=============  ======================================================================
``simcse``     SimCSE (Gao et al., 2021): unsupervised (dropout views) and supervised (NLI) defaults
``declutr``    DeCLUTR (Giorgi et al., 2021): span views of one document
``dpr``        DPR (Karpukhin et al., 2020) with DensePhrases' pre-batch negatives: query/passage data
``sg_bert``    SG-BERT (Kim et al., 2021): self-guided losses, model and trainer
``multitask``  multitask fine-tuning with PCGrad (Yu et al., 2020)
=============  ======================================================================

CLEAR (Wu et al., 2020) is the library's core: `contrastive_hf.data.augmentations` and `ContrastiveForPreTraining`.
"""
