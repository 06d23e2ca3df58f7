//! The gateway's allow-table: per API family, the (method, path) pairs it forwards, as data.
//! Not prefixes: a path that is not exactly a route's is refused (403), a route's path with
//! another method too (405). Each route says how its usage is read (its [`Api`]) or that it
//! costs nothing, which query parameters it takes, and what its body must be.
//!
//! Only what agents use to talk to a model is here: the key opens the whole account (files,
//! fine-tuning, batches, stored completions and responses, organisation and admin keys), and
//! every route beyond the model would let a round read or spend elsewhere. What the real CLIs
//! call (checked by `codex_check`, `claude_check` and `tests/it/gateway_agents.rs`): codex 0.169
//! with the preset's provider only `POST responses` (no WebSocket, no `models`, no
//! `responses/compact`, which it uses only with OpenAI's own provider); claude 2.1.328 only
//! `POST v1/messages?beta=true` (its `HEAD /api/hello` probe is off with
//! `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`, and a 403 does not stop it); the built-in agent
//! `POST chat/completions`.

use axum::http::Method;

use super::config::ApiFamily;
use crate::gateway::sink::Api;

/// One segment of a route's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seg {
    /// Exactly this text.
    Lit(&'static str),
    /// A model id: ASCII letters and digits first and last, `-._:` between, at most 256 bytes.
    ModelId,
}

/// What a route costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Its response carries usage, read per the route's [`Api`] and counted.
    Metered,
    /// It costs no tokens (model lists, token counting): nothing to read.
    Free,
}

/// What a route's request body must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRule {
    /// No body (a GET).
    Empty,
    /// A JSON object serde_json parses; `stream` absent or a boolean.
    Json {
        /// A streamed request gets `stream_options.include_usage = true` (Chat, Completions:
        /// their streams carry usage only when asked).
        ask_usage: bool,
        /// Whether `stream: true` is taken at all.
        streams: bool,
        /// Fields that must be absent, `null` or `false`: they would move the work out of the
        /// response the gateway reads (`background` runs a Response after the request ends).
        forbidden: &'static [&'static str],
    },
}

/// One forwarded (method, path) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The method.
    pub method: &'static str,
    /// The path after the upstream URL's path.
    pub path: &'static [Seg],
    /// The API spoken (how usage is read; `Other` for the free routes).
    pub api: Api,
    /// Metered or free.
    pub cost: Cost,
    /// Query parameters taken, each with the values taken.
    pub query: &'static [(&'static str, &'static [&'static str])],
    /// The body.
    pub body: BodyRule,
}

const JSON_PLAIN: BodyRule = BodyRule::Json {
    ask_usage: false,
    streams: true,
    forbidden: &[],
};

/// OpenAI Responses, Chat Completions, Completions, Embeddings and the model list (and what
/// vLLM, Ollama, llama.cpp, LiteLLM and OpenRouter serve under the same paths), relative to the
/// upstream URL's path (`https://api.openai.com/v1`).
pub const OPENAI: &[Route] = &[
    Route {
        method: "POST",
        path: &[Seg::Lit("responses")],
        api: Api::Responses,
        cost: Cost::Metered,
        query: &[],
        body: BodyRule::Json {
            ask_usage: false,
            streams: true,
            forbidden: &["background"],
        },
    },
    Route {
        method: "POST",
        path: &[Seg::Lit("chat"), Seg::Lit("completions")],
        api: Api::Chat,
        cost: Cost::Metered,
        query: &[],
        body: BodyRule::Json {
            ask_usage: true,
            streams: true,
            forbidden: &[],
        },
    },
    Route {
        method: "POST",
        path: &[Seg::Lit("completions")],
        api: Api::Completions,
        cost: Cost::Metered,
        query: &[],
        body: BodyRule::Json {
            ask_usage: true,
            streams: true,
            forbidden: &[],
        },
    },
    Route {
        method: "POST",
        path: &[Seg::Lit("embeddings")],
        api: Api::Embeddings,
        cost: Cost::Metered,
        query: &[],
        body: BodyRule::Json {
            ask_usage: false,
            streams: false,
            forbidden: &[],
        },
    },
    Route {
        method: "GET",
        path: &[Seg::Lit("models")],
        api: Api::Other,
        cost: Cost::Free,
        query: &[],
        body: BodyRule::Empty,
    },
    Route {
        method: "GET",
        path: &[Seg::Lit("models"), Seg::ModelId],
        api: Api::Other,
        cost: Cost::Free,
        query: &[],
        body: BodyRule::Empty,
    },
];

/// claude sends `?beta=true` on every Messages request.
const BETA: &[(&str, &[&str])] = &[("beta", &["true"])];

/// Anthropic Messages, token counting and the model list, relative to the upstream URL's path
/// (`https://api.anthropic.com`, no path: the routes carry `v1`).
pub const ANTHROPIC: &[Route] = &[
    Route {
        method: "POST",
        path: &[Seg::Lit("v1"), Seg::Lit("messages")],
        api: Api::Messages,
        cost: Cost::Metered,
        query: BETA,
        body: JSON_PLAIN,
    },
    Route {
        method: "POST",
        path: &[
            Seg::Lit("v1"),
            Seg::Lit("messages"),
            Seg::Lit("count_tokens"),
        ],
        api: Api::Other,
        cost: Cost::Free,
        query: BETA,
        body: BodyRule::Json {
            ask_usage: false,
            streams: false,
            forbidden: &[],
        },
    },
    Route {
        method: "GET",
        path: &[Seg::Lit("v1"), Seg::Lit("models")],
        api: Api::Other,
        cost: Cost::Free,
        query: BETA,
        body: BodyRule::Empty,
    },
    Route {
        method: "GET",
        path: &[Seg::Lit("v1"), Seg::Lit("models"), Seg::ModelId],
        api: Api::Other,
        cost: Cost::Free,
        query: BETA,
        body: BodyRule::Empty,
    },
];

/// The table of a family.
pub fn table(family: ApiFamily) -> &'static [Route] {
    match family {
        ApiFamily::OpenAi => OPENAI,
        ApiFamily::Anthropic => ANTHROPIC,
    }
}

/// Why no route took a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// No route has this path (403).
    NotAllowed,
    /// A route's path in another letter case (400: an upstream may fold case).
    CaseVariant,
    /// Routes have this path, with these methods (405).
    Method {
        /// The methods taken, e.g. `POST`.
        allowed: Vec<&'static str>,
    },
    /// A query parameter (or value) the route does not take (400).
    Query {
        /// The parameter's name.
        name: String,
    },
}

/// True when `s` is a model id (see [`Seg::ModelId`]).
fn model_id(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(u8::is_ascii_alphanumeric);
    s.len() <= 256
        && edge(b.first())
        && edge(b.last())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b':'))
        && !s.contains("..")
}

fn path_matches(route: &Route, segs: &[String], fold: bool) -> bool {
    route.path.len() == segs.len()
        && route.path.iter().zip(segs).all(|(want, got)| match want {
            Seg::Lit(l) if fold => l.eq_ignore_ascii_case(got),
            Seg::Lit(l) => l == got,
            Seg::ModelId => model_id(got),
        })
}

/// The route for `method` on `segs` (the path after the prefix) with `query`.
pub fn lookup(
    family: ApiFamily,
    method: &Method,
    segs: &[String],
    query: &[(String, String)],
) -> Result<&'static Route, RouteError> {
    let routes: Vec<&Route> = table(family)
        .iter()
        .filter(|r| path_matches(r, segs, false))
        .collect();
    if routes.is_empty() {
        if table(family).iter().any(|r| path_matches(r, segs, true)) {
            return Err(RouteError::CaseVariant);
        }
        return Err(RouteError::NotAllowed);
    }
    let Some(route) = routes.iter().find(|r| r.method == method.as_str()) else {
        return Err(RouteError::Method {
            allowed: routes.iter().map(|r| r.method).collect(),
        });
    };
    for (name, value) in query {
        let ok = route
            .query
            .iter()
            .any(|(n, values)| n == name && values.contains(&value.as_str()));
        if !ok {
            return Err(RouteError::Query { name: name.clone() });
        }
    }
    Ok(route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<String> {
        p.split('/').map(str::to_owned).collect()
    }

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn the_openai_table_takes_the_model_routes_and_nothing_else() {
        let ok = |m: Method, p: &str| lookup(ApiFamily::OpenAi, &m, &segs(p), &[]);
        assert_eq!(ok(Method::POST, "responses").unwrap().api, Api::Responses);
        assert_eq!(ok(Method::POST, "chat/completions").unwrap().api, Api::Chat);
        assert_eq!(
            ok(Method::POST, "completions").unwrap().api,
            Api::Completions
        );
        assert_eq!(ok(Method::POST, "embeddings").unwrap().api, Api::Embeddings);
        assert_eq!(ok(Method::GET, "models").unwrap().cost, Cost::Free);
        assert!(ok(Method::GET, "models/ft:gpt-4o-mini:org::abc123").is_ok());
        for p in [
            "files",
            "fine_tuning/jobs",
            "batches",
            "organization/admin_api_keys",
            "responses/resp_1",
            "responses/resp_1/input_items",
            "responses/compact",
            "chat/completions/chatcmpl_1",
            "models/..",
            "models/-x",
            "models/a..b",
        ] {
            assert_eq!(ok(Method::POST, p), Err(RouteError::NotAllowed), "{p}");
            assert_eq!(ok(Method::GET, p), Err(RouteError::NotAllowed), "{p}");
        }
        // The red team's cases: deleting a fine-tuned model, listing stored completions.
        assert_eq!(
            ok(Method::DELETE, "models/ft:gpt-4o:org::x1"),
            Err(RouteError::Method {
                allowed: vec!["GET"]
            })
        );
        assert_eq!(
            ok(Method::GET, "chat/completions"),
            Err(RouteError::Method {
                allowed: vec!["POST"]
            })
        );
        assert_eq!(ok(Method::POST, "Responses"), Err(RouteError::CaseVariant));
        assert_eq!(
            lookup(
                ApiFamily::OpenAi,
                &Method::POST,
                &segs("chat/completions"),
                &q(&[("limit", "100")])
            ),
            Err(RouteError::Query {
                name: "limit".into()
            })
        );
    }

    #[test]
    fn the_anthropic_table_takes_messages_with_beta_true_only() {
        let look = |m: Method, p: &str, query: &[(&str, &str)]| {
            lookup(ApiFamily::Anthropic, &m, &segs(p), &q(query))
        };
        let r = look(Method::POST, "v1/messages", &[("beta", "true")]).unwrap();
        assert_eq!((r.api, r.cost), (Api::Messages, Cost::Metered));
        assert_eq!(
            look(Method::POST, "v1/messages/count_tokens", &[])
                .unwrap()
                .cost,
            Cost::Free
        );
        assert!(look(Method::GET, "v1/models", &[]).is_ok());
        assert!(matches!(
            look(Method::POST, "v1/messages", &[("beta", "false")]),
            Err(RouteError::Query { .. })
        ));
        for p in ["v1/messages/batches", "v1/files", "api/hello", "messages"] {
            assert_eq!(
                look(Method::POST, p, &[]),
                Err(RouteError::NotAllowed),
                "{p}"
            );
        }
    }
}
