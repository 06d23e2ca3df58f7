//! The zygote's runner side against processes that are not a zygote (its failures), and the
//! argument rewriting's guard. The zygote itself, forking real standbys, is checked end to end
//! in `tests/it/standby_helper.rs`.

use super::*;

#[test]
fn the_zygote_s_name_and_the_helper_s_are_as_long() {
    assert_eq!(ZYGOTE_ARG.len(), HELPER_ARG.len());
    assert_ne!(ZYGOTE_ARG, HELPER_ARG);
}

#[test]
fn a_zygote_that_never_answers_or_is_gone_fails_the_fork_within_its_wait() {
    // `/bin/true` started as if it were the zygote: it exits at once, without an answer.
    let z = Zygote::start(Path::new("/bin/true"), Duration::from_secs(1)).unwrap();
    let start = Instant::now();
    let err = z.fork().map(|_| ()).unwrap_err();
    assert!(
        start.elapsed() <= ANSWER_WAIT + Duration::from_secs(5),
        "{err}"
    );
}
