//! Who is making a request.

/// The person (or token) behind a request, put in the request's extensions by the access layer
/// so that writes can be attributed in the audit log; `None` when the server does not know.
#[derive(Debug, Clone, Default)]
pub struct Actor(pub Option<String>);
