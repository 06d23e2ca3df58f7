//! The signature of a delivery: `X-Ralph-Signature: sha256=<hex HMAC-SHA256 of the body>` with
//! the secret of `[notify] secret_file` (SPEC §13), the form GitHub's webhooks use, so a receiver
//! checks it in a few lines (docs/webhooks.md).

use ring::hmac;

/// The header's value for `body` signed with `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&key, body);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_the_rfc_4231_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
