/*
 * tok_data.S - the Mistral v3 SentencePiece model, embedded so that x4-synth
 * writes a real vocabulary without a network fetch or a data path at run
 * time.  The Makefile assembles this with -I. from the tree's root, which is
 * what the .incbin path below is relative to.  lib/tok/spm.c derives Xing4's
 * vocabulary from these bytes (x4_vocab_xing4).
 */
	.section .rodata.x4_tok_mistral_v3, "a", @progbits
	.balign 16
	.globl x4_tok_mistral_v3
	.type x4_tok_mistral_v3, @object
x4_tok_mistral_v3:
	.incbin "data/tokenizer/mistral-v3.model"
x4_tok_mistral_v3_end:
	.size x4_tok_mistral_v3, x4_tok_mistral_v3_end - x4_tok_mistral_v3

	/* The length as data, so that C needs no linker-script symbols. */
	.balign 8
	.globl x4_tok_mistral_v3_len
	.type x4_tok_mistral_v3_len, @object
x4_tok_mistral_v3_len:
	.quad x4_tok_mistral_v3_end - x4_tok_mistral_v3
	.size x4_tok_mistral_v3_len, 8

	/* Data only: without this note the linker would make the stack executable. */
	.section .note.GNU-stack, "", @progbits
