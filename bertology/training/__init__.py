"""The one training loop, shared by pretrain, finetune and distill."""
