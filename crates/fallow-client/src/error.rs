//! Client errors and the causes of transaction aborts (`-TXNABORT <cause> ...` from the server, or the
//! combiner's own).
use std::fmt;
use std::io;

/// Why a transaction was aborted. Every cause is retryable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AbortCause {
    /// The lock could not be shared and phasing is off, or a held lock cannot take another mode.
    Conflict,
    /// Waiting would have closed a cycle.
    Deadlock,
    /// The lock wait passed `txn-lock-wait-ms`.
    Timeout,
    /// The server's lock table or a lock's queue is full.
    Full,
    /// Client side: an operation of a combined transaction conflicted with a lock its group holds, or the
    /// group gave up waiting for its members (see `combine`).
    Combine,
    /// A cause word this client does not know.
    Other(String),
}

impl AbortCause {
    /// Parses the text of an error reply; None unless it is a `TXNABORT` error.
    pub fn from_error_reply(text: &str) -> Option<AbortCause> {
        let rest = text.strip_prefix("TXNABORT")?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let word = rest.split_whitespace().next().unwrap_or("");
        Some(match word.to_ascii_lowercase().as_str() {
            "conflict" => AbortCause::Conflict,
            "deadlock" => AbortCause::Deadlock,
            "timeout" => AbortCause::Timeout,
            "full" => AbortCause::Full,
            _ => AbortCause::Other(word.to_string()),
        })
    }

    pub fn name(&self) -> &str {
        match self {
            AbortCause::Conflict => "conflict",
            AbortCause::Deadlock => "deadlock",
            AbortCause::Timeout => "timeout",
            AbortCause::Full => "full",
            AbortCause::Combine => "combine",
            AbortCause::Other(word) => word,
        }
    }
}

impl fmt::Display for AbortCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug)]
pub enum ClientError {
    /// The connection failed or timed out.
    Io(io::Error),
    /// The transaction was aborted (after the retries `transaction` allows).
    Aborted(AbortCause),
    /// An error reply other than TXNABORT.
    Server(String),
    /// The server sent bytes that are not a valid reply within the limits.
    Protocol(String),
    /// The call itself is wrong (no arguments, no nodes).
    Usage(String),
    /// Some nodes (or members of a combined group) committed and others did not: fallow keeps no 2PC log,
    /// so a failure between the per-node commits leaves a partial commit. Not retried, since the committed
    /// part would be applied twice.
    PartialCommit(String),
}

impl ClientError {
    /// The error for a top-level error reply: TXNABORT becomes `Aborted`.
    pub fn from_error_reply(text: String) -> ClientError {
        match AbortCause::from_error_reply(&text) {
            Some(cause) => ClientError::Aborted(cause),
            None => ClientError::Server(text),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(error) => write!(f, "connection error: {error}"),
            ClientError::Aborted(cause) => write!(f, "transaction aborted: {cause}"),
            ClientError::Server(text) => write!(f, "server error: {text}"),
            ClientError::Protocol(text) => write!(f, "protocol error: {text}"),
            ClientError::Usage(text) => write!(f, "usage error: {text}"),
            ClientError::PartialCommit(text) => write!(f, "partial commit: {text}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(error: io::Error) -> Self {
        ClientError::Io(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_txnabort_causes() {
        let cases = [
            (
                "TXNABORT conflict lock on 's' is held",
                Some(AbortCause::Conflict),
            ),
            ("TXNABORT deadlock", Some(AbortCause::Deadlock)),
            ("TXNABORT timeout after 500 ms", Some(AbortCause::Timeout)),
            ("TXNABORT full", Some(AbortCause::Full)),
            (
                "TXNABORT wounded",
                Some(AbortCause::Other("wounded".into())),
            ),
            ("TXNABORT", Some(AbortCause::Other(String::new()))),
            ("TXNABORTED conflict", None),
            ("ERR TXNABORT conflict", None),
            ("WRONGTYPE Operation against a key", None),
        ];
        for (text, expected) in cases {
            assert_eq!(AbortCause::from_error_reply(text), expected, "{text}");
        }
    }

    #[test]
    fn error_replies_become_errors() {
        assert!(matches!(
            ClientError::from_error_reply("TXNABORT deadlock".into()),
            ClientError::Aborted(AbortCause::Deadlock)
        ));
        assert!(matches!(
            ClientError::from_error_reply("ERR nope".into()),
            ClientError::Server(text) if text == "ERR nope"
        ));
    }
}
