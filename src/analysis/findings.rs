//! Findings: diagnoses with their evidence, their size in bytes, and the fix in one sentence.
//! Each fires only where the data shows the problem, so an ordinary training run gets none of
//! the warnings.
