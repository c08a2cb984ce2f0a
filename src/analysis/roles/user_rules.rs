//! User rules: "frames that match this regex make role R", from a small TOML or JSON file.
//!
//! ```toml
//! [[rule]]
//! frame = "my_project/data/"      # regex on `filename:name` of any frame of the stack
//! role = "input"                  # a built-in role, or a name of your own ("kv_cache")
//! ```
//!
//! The same as JSON: `{"rule": [{"frame": "my_project/data/", "role": "input"}]}`. Files come from
//! users (and uploads on the server), so everything is bounded: the file's size, how deep its
//! brackets nest, the number of rules, each regex's compiled size, the length of role names.

use regex_automata::meta::Regex;
use serde::Deserialize;

/// Largest rules file read.
pub const MAX_RULES_FILE_BYTES: usize = 64 * 1024;
/// Most rules in one file.
pub const MAX_RULES: usize = 200;
/// Deepest nesting of `[`/`{` read. A rules file needs 3 (`{"rule": [{…}]}`); the TOML and
/// JSON parsers recurse once per level with no limit of their own that fits a thread's stack
/// (`x = [[[…` 8,000 deep overflowed a server worker's and aborted the process), so deeper files
/// are refused by [`nesting_depth`] before any parser sees them. Not a setting: raising it only
/// lets the crash back in.
pub const MAX_RULES_NESTING: usize = 32;
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
    #[error(
        "the rules file nests brackets deeper than {MAX_RULES_NESTING} (line {line}); a rules file needs 3"
    )]
    TooDeep { line: usize },
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
        let json = text.trim_start().starts_with('{');
        if let Err(line) = check_nesting(text.as_bytes(), json) {
            return Err(RulesError::TooDeep { line });
        }
        let file: RulesFile = if json {
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

/// Whether `text` keeps its brackets within [`MAX_RULES_NESTING`]; else the line (from 1)
/// where it goes past. See [`nesting_depth`].
fn check_nesting(text: &[u8], json: bool) -> Result<(), usize> {
    match nesting_depth(text, json, MAX_RULES_NESTING) {
        Ok(_) => Ok(()),
        Err(at) => Err(1 + text[..at].iter().filter(|&&b| b == b'\n').count()),
    }
}

/// The deepest nesting of `[` and `{` in `text` outside strings (and, in TOML, comments), or
/// the byte offset where it first passes `limit`. One pass, no allocation.
///
/// It must never count less than the parser will nest, so where a string ends it follows the
/// parser's own rule (TOML: `"…"` and `'…'` end at the line's end at the latest, `"""…"""` and
/// `'''…'''` may close with up to two more quotes; a backslash escapes the next byte in basic
/// strings). Where the two could disagree (an unterminated string, stray closers), the parser
/// refuses the file at that point, before nesting any deeper.
fn nesting_depth(text: &[u8], json: bool, limit: usize) -> Result<usize, usize> {
    let (mut depth, mut deepest, mut at) = (0usize, 0usize, 0usize);
    while let Some(&byte) = text.get(at) {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(at);
                }
                deepest = deepest.max(depth);
                at += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                at += 1;
            }
            b'#' if !json => at = line_end(text, at),
            b'"' => at = string_end(text, at, json),
            b'\'' if !json => at = string_end(text, at, json),
            _ => at += 1,
        }
    }
    Ok(deepest)
}

/// The offset of the `\n` ending the line at `from`, or the end.
fn line_end(text: &[u8], from: usize) -> usize {
    text[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |n| from + n)
}

/// The offset just past the string that opens at `start` (a `"` or `'`).
fn string_end(text: &[u8], start: usize, json: bool) -> usize {
    let quote = text[start];
    // Basic strings (`"`) have escapes; literal ones (`'`, TOML only) do not.
    let escapes = quote == b'"';
    let triple = !json && text[start..].starts_with(&[quote; 3]);
    let one_line = !triple && !json;
    let mut at = start + if triple { 3 } else { 1 };
    while let Some(&byte) = text.get(at) {
        if escapes && byte == b'\\' && !(one_line && text.get(at + 1) == Some(&b'\n')) {
            at += 2;
        } else if byte == quote {
            if !triple {
                return at + 1;
            }
            if text[at..].starts_with(&[quote; 3]) {
                // `"""""` closes with the quotes before the last three inside the string.
                let run = text[at..].iter().take_while(|&&b| b == quote).count();
                return at + run.min(5);
            }
            at += 1;
        } else if byte == b'\n' && one_line {
            // A one-line TOML string cannot hold a line break: the parser stops here.
            return at;
        } else {
            at += 1;
        }
    }
    text.len()
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

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        // The file that aborted the server: 8,000 deep, within the size cap.
        let deep = format!("x = {}{}", "[".repeat(8000), "]".repeat(8000));
        let refused = UserRules::parse(&deep).map(|r| r.rules().len());
        assert_eq!(refused, Err(RulesError::TooDeep { line: 1 }));
        let json = format!("{{\"rule\": {}{}}}", "[".repeat(8000), "]".repeat(8000));
        assert!(matches!(
            UserRules::parse(&json),
            Err(RulesError::TooDeep { .. })
        ));
        // Just at the limit: the parser's own message (not rules), no crash.
        let at_limit = format!(
            "x = {}{}",
            "[".repeat(MAX_RULES_NESTING),
            "]".repeat(MAX_RULES_NESTING)
        );
        assert!(matches!(
            UserRules::parse(&at_limit),
            Err(RulesError::Syntax(_))
        ));
        let message = UserRules::parse(&format!("\n\n{deep}"))
            .map(|r| r.rules().len())
            .expect_err("refused")
            .to_string();
        assert!(
            message.contains("32") && message.contains("line 3"),
            "{message}"
        );
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let depth = |text: &str| nesting_depth(text.as_bytes(), false, usize::MAX);
        assert_eq!(
            depth("[[rule]]\nframe = '[[[['\nrole = \"x[[[\\\"[[\"\n"),
            Ok(2)
        );
        assert_eq!(depth("# [[[[[[\nx = 1"), Ok(0));
        assert_eq!(depth("x = '''\n[[[[\n'''''"), Ok(0));
        assert_eq!(depth("x = \"\"\"\n[[[\\\"\"\"[\n\"\"\"\"\""), Ok(0));
        // A one-line string ends at the line's end whatever follows: the parser stops there,
        // and the scan counts what comes after.
        assert_eq!(depth("x = \"abc\n[[[\n"), Ok(3));
        assert_eq!(depth("x = \"abc\\\n[[[\n"), Ok(3));
        // JSON has no comments and no single-quoted strings.
        let json = |text: &str| nesting_depth(text.as_bytes(), true, usize::MAX);
        assert_eq!(json("{\"a\": \"#[[\", \"b\": '[[' }"), Ok(3));
        // Valid files are 3 deep at most.
        let valid = "{\"rule\": [{\"frame\": \"a[b]\", \"role\": \"x\"}]}";
        assert_eq!(json(valid), Ok(3));
        assert!(UserRules::parse(valid).is_ok());
    }
}
