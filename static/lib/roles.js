// @ts-check
// The roles of memory (docs/roles.md), in the order every view stacks and lists them.

/** Built-in roles, in display order; custom roles from user rules follow, by name. */
export const ROLES = [
  "parameter",
  "gradient",
  "optimizer_state",
  "comm_buffer",
  "activation",
  "output",
  "kv_cache",
  "workspace",
  "temporary",
  "input",
  "unknown",
];

/** One sentence per role, for hovers (docs/roles.md says how each is decided). */
export const ROLE_HELP = {
  parameter: "Weights and buffers of the model: made by .to()/.cuda(), nn.init, load_state_dict or from_pretrained, or alive since before recording began.",
  gradient: ".grad tensors: made in backward and kept past it, until zero_grad or the next step.",
  optimizer_state: "Made inside torch/optim/ and kept past the step: Adam's exp_avg and exp_avg_sq, momentum buffers.",
  comm_buffer: "Held by a distributed library for communication: DDP buckets holding copies of the gradients, FSDP's all-gathered (unsharded) parameters.",
  activation: "Made in forward (or the loss) and kept: saved for backward, or never freed when no backward comes.",
  output: "What the program keeps of a forward pass: the model's output (logits, a loss) kept across the next pass, or still held when no backward runs.",
  kv_cache: "The key/value cache of a generation loop: replaced by forward every step, or preallocated by a cache object and kept through the steps.",
  workspace: "A library's workspace: cuBLAS/cuBLASLt allocate one per stream and thread on the first matmul and never free it.",
  temporary: "Made and freed within one phase: forward, backward, the optimizer step or model setup.",
  input: "The batch: made by the training loop outside forward, backward and the step.",
  unknown: "No rule decides; snapview says so rather than guess.",
};

/** The hover text of a role, custom ones included. */
export function roleHelp(role) {
  return ROLE_HELP[role] ?? "A role of your own, from your rules (--roles) or torch's annotate.";
}
