//! User rules: "frames that match this regex make role R", from a small TOML or JSON file.
//!
//! ```toml
//! [[rule]]
//! frame = "my_project/data/"      # regex on `filename:name` of any frame of the stack
//! role = "input"                  # a built-in role, or a name of your own ("kv_cache")
//! ```
//!
//! The same as JSON: `{"rule": [{"frame": "my_project/data/", "role": "input"}]}`. Files come from
//! users (and uploads on the server), so everything is bounded: the file's size, the number of
//! rules, each regex's compiled size, the length of role names.

use regex_automata::meta::Regex;
use serde::Deserialize;

/// Largest rules file read.
pub const MAX_RULES_FILE_BYTES: usize = 64 * 1024;
/// Most rules in one file.
pub const MAX_RULES: usize = 200;
/// Compiled size limit of one regex (its NFA), so a rule cannot blow up memory or time.
const MAX_REGEX_BYTES: usize = 256 * 1024;
/// Longest custom role name.
const MAX_ROLE_NAME: usize = 40;

/// Rules in file order: the first that matches a stack decides.
#[derive(Debug, Default)]
pub struct UserRules {
    rules: Vec<UserRule>,
}

#[derive(Debug)]
pub struct UserRule {
    /// The regex as written, for `because`.
    pub pattern: String,
    pub role: String,
    regex: Regex,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RulesError {
    #[error("the rules file is {0} bytes; at most {MAX_RULES_FILE_BYTES} are read")]
    TooLarge(usize),
    #[error("the rules file is neither TOML nor JSON of rules: {0}")]
    Syntax(String),
    #[error("the rules file has {0} rules; at most {MAX_RULES} are allowed")]
    TooMany(usize),
    #[error("rule {index}: the regex {pattern:?} is not valid or too large: {reason}")]
    Regex {
        index: usize,
        pattern: String,
        reason: String,
    },
    #[error(
        "rule {index}: the role {role:?} should be 1 to {MAX_ROLE_NAME} letters, digits, '_' or '-'"
    )]
    RoleName { index: usize, role: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default, alias = "rules")]
    rule: Vec<RuleEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    frame: String,
    role: String,
}

impl UserRules {
    /// A hash of the rules (each pattern and role, in order): what a stored summary records
    /// so that it is trusted only with the rules it was made with (see `crate::index`).
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for rule in &self.rules {
            // Lengths first, so that no two lists of texts hash alike by where they split.
            hasher.update(&(rule.pattern.len() as u64).to_le_bytes());
            hasher.update(rule.pattern.as_bytes());
            hasher.update(&(rule.role.len() as u64).to_le_bytes());
            hasher.update(rule.role.as_bytes());
        }
        hasher.digest()
    }

    /// Parses a rules file: JSON when it starts with `{`, TOML otherwise.
    pub fn parse(text: &str) -> Result<Self, RulesError> {
        if text.len() > MAX_RULES_FILE_BYTES {
            return Err(RulesError::TooLarge(text.len()));
        }
        let file: RulesFile = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| RulesError::Syntax(e.to_string()))?
        } else {
            basic_toml::from_str(text).map_err(|e| RulesError::Syntax(e.to_string()))?
        };
        if file.rule.len() > MAX_RULES {
            return Err(RulesError::TooMany(file.rule.len()));
        }
        let mut rules = Vec::with_capacity(file.rule.len());
        for (index, entry) in file.rule.into_iter().enumerate() {
            let index = index + 1;
            let valid_name = !entry.role.is_empty()
                && entry.role.len() <= MAX_ROLE_NAME
                && entry
                    .role
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                return Err(RulesError::RoleName {
                    index,
                    role: entry.role,
                });
            }
            let regex = Regex::builder()
                .syntax(regex_automata::util::syntax::Config::new().nest_limit(64))
                .configure(
                    Regex::config()
                        .nfa_size_limit(Some(MAX_REGEX_BYTES))
                        .onepass_size_limit(Some(MAX_REGEX_BYTES))
                        .dfa_size_limit(Some(MAX_REGEX_BYTES))
                        .hybrid_cache_capacity(2 * MAX_REGEX_BYTES),
                )
                .build(&entry.frame)
                .map_err(|e| RulesError::Regex {
                    index,
                    pattern: entry.frame.clone(),
                    reason: e.to_string(),
                })?;
            rules.push(UserRule {
                pattern: entry.frame,
                role: entry.role,
                regex,
            });
        }
        Ok(Self { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[UserRule] {
        &self.rules
    }

    /// The first rule matching any of `frames` (as `filename:name`), by index.
    pub fn first_match<'f>(
        &self,
        frames: impl Iterator<Item = (&'f str, &'f str)> + Clone,
    ) -> Option<usize> {
        let mut text = String::new();
        self.rules.iter().position(|rule| {
            frames.clone().any(|(file, name)| {
                text.clear();
                text.push_str(file);
                text.push(':');
                text.push_str(name);
                rule.regex.is_match(text.as_str())
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_give_the_same_rules() {
        let toml = "[[rule]]\nframe = 'data/loader\\.py'\nrole = 'input'\n\n[[rule]]\nframe = 'kv_cache'\nrole = 'kv_cache'\n";
        let json = r#"{"rules": [{"frame": "data/loader\\.py", "role": "input"}, {"frame": "kv_cache", "role": "kv_cache"}]}"#;
        for text in [toml, json] {
            let rules = UserRules::parse(text).expect("valid rules");
            assert_eq!(rules.rules().len(), 2);
            assert_eq!(rules.rules()[1].role, "kv_cache");
            let frames = [("/x/data/loader.py", "next"), ("/x/train.py", "main")];
            assert_eq!(rules.first_match(frames.iter().copied()), Some(0));
            let frames = [("/x/model.py", "update_kv_cache")];
            assert_eq!(rules.first_match(frames.iter().copied()), Some(1));
            let frames = [("/x/model.py", "forward")];
            assert_eq!(rules.first_match(frames.iter().copied()), None);
        }
    }

    #[test]
    fn bad_rules_are_refused_with_a_reason() {
        assert!(matches!(
            UserRules::parse("[[rule]]\nframe = '('\nrole = 'x'\n"),
            Err(RulesError::Regex { index: 1, .. })
        ));
        assert!(matches!(
            UserRules::parse("[[rule]]\nframe = 'a'\nrole = 'no spaces'\n"),
            Err(RulesError::RoleName { .. })
        ));
        assert!(matches!(
            UserRules::parse("not = [toml"),
            Err(RulesError::Syntax(_))
        ));
        assert!(matches!(
            UserRules::parse(&"#".repeat(MAX_RULES_FILE_BYTES + 1)),
            Err(RulesError::TooLarge(_))
        ));
        let many = "[[rule]]\nframe = 'a'\nrole = 'x'\n".repeat(MAX_RULES + 1);
        assert!(matches!(
            UserRules::parse(&many),
            Err(RulesError::TooMany(_))
        ));
        // A regex whose automaton is huge is refused, not built.
        let huge = "[[rule]]\nframe = '\\w{1000}\\w{1000}\\w{1000}'\nrole = 'x'\n";
        assert!(
            matches!(UserRules::parse(huge), Err(RulesError::Regex { .. })),
            "{:?}",
            UserRules::parse(huge).map(|r| r.rules().len())
        );
    }
}
