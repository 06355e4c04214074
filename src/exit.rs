//! The classes of failure every tool of this crate maps to its exit code, and how serious each
//! is when several files fail differently.

/// The class of a failure, which the `wi-fetch` binary turns into its exit code.
///
/// When several files fail, `FetchError::several` keeps the most serious failure
/// ([`ExitClass::severity`]): integrity (2) > access refused (5) > not found (4) > network (3) >
/// local (1), so the exit code does not depend on the order in which the files failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExitClass {
    /// Usage or local error (bad arguments, disk full, permissions): exit code 1.
    Local,
    /// The bytes or the model are wrong (hash mismatch, failed tensor verification), or what
    /// the server said about a file asked for cannot be trusted (an unsafe name): 2.
    Integrity,
    /// The network or the server failed, after retries: 3.
    Network,
    /// Repository, revision or file not found (a private repository the token cannot see
    /// included: the Hub does not tell it apart), or not in the cache in offline mode: 4.
    NotFound,
    /// Access refused: a gated repository whose conditions the token has not accepted (or no
    /// token), a token the server refused, a 401 or 403 without more: 5. Another token, not
    /// another name, is the fix.
    Denied,
    /// Stopped on request (SIGINT, SIGTERM, a cancelled token): 130, as a shell reports a
    /// command ended by Ctrl-C. What arrived is kept; running the same fetch again resumes.
    Interrupted,
}

impl ExitClass {
    /// The process exit code: 1, 2, 3, 4, 5 or 130.
    pub fn code(self) -> i32 {
        match self {
            ExitClass::Interrupted => 130,
            ExitClass::Local => 1,
            ExitClass::Integrity => 2,
            ExitClass::Network => 3,
            ExitClass::NotFound => 4,
            ExitClass::Denied => 5,
        }
    }

    /// How serious the class is, to choose one when several files failed differently: stopped
    /// on request (the run as a whole) > integrity (wrong bytes or a broken model) > access
    /// refused > not found (retrying will not help either) > network (retrying may) > local.
    /// Higher is more serious.
    pub fn severity(self) -> u8 {
        match self {
            ExitClass::Interrupted => 6,
            ExitClass::Integrity => 5,
            ExitClass::Denied => 4,
            ExitClass::NotFound => 3,
            ExitClass::Network => 2,
            ExitClass::Local => 1,
        }
    }

    /// The more serious of `self` and `other` (`self` when they are as serious): the class a
    /// run with several failures reports.
    #[must_use]
    pub fn worst(self, other: Option<ExitClass>) -> ExitClass {
        match other {
            Some(o) if o.severity() > self.severity() => o,
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ExitClass;

    #[test]
    fn the_worst_class_wins_whatever_the_order() {
        let all = [
            ExitClass::Local,
            ExitClass::Network,
            ExitClass::NotFound,
            ExitClass::Denied,
            ExitClass::Integrity,
            ExitClass::Interrupted,
        ];
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                let want = if i >= j { *a } else { *b };
                assert_eq!(a.worst(Some(*b)), want);
                assert_eq!(b.worst(Some(*a)), want);
            }
            assert_eq!(a.worst(None), *a);
        }
    }
}
