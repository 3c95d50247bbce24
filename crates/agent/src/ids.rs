//! The ids serve keeps: every input a principal posts is kept under the principal's name,
//! `<principal>:<id>` (`bursar_session::namespaced`, which serve calls on every authenticated
//! input), so two principals never share an id. A principal's name holds no `:` (the configuration
//! refuses one); the id after it may. An id read without a principal (`bursar eval`, a replayed
//! file) is kept as it was posted.
//!
//! An agent that recognises its own events in the decision stream (the submission its admission
//! agent posted) asks [`posted_as`] rather than parsing the kept id itself.

/// What separates a principal's name from the id it posted.
pub const SEPARATOR: char = ':';

/// Whether `kept`, an id as serve keeps it, is the id `posted` as some principal posted it
/// (`<principal>:<posted>`), or `posted` itself (read without a principal). Pure.
pub fn posted_as(kept: &str, posted: &str) -> bool {
    kept == posted || kept.split_once(SEPARATOR).is_some_and(|(principal, id)| !principal.is_empty() && id == posted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_id_is_the_posted_one_under_one_principal() {
        assert!(posted_as("sub-lab-1", "sub-lab-1"), "read without a principal");
        assert!(posted_as("slurmctld:sub-lab-1", "sub-lab-1"));
        assert!(posted_as("kube-checks:gpu-a-1-submitted", "gpu-a-1-submitted"));
        // The principal is everything before the first `:`; the posted id may hold one.
        assert!(posted_as("p:a:b", "a:b"));
        assert!(!posted_as("p:a:b", "b"), "`a:b` posted by `p` is not `b`");
        assert!(posted_as("a:b", "a:b"), "an id with a `:` read without a principal");
        assert!(!posted_as("bob:cli-approve-sub-lab-1", "sub-lab-1"));
        assert!(!posted_as("xsub-lab-1", "sub-lab-1"));
        assert!(!posted_as(":sub-lab-1", "sub-lab-1"), "no principal has an empty name");
    }
}
