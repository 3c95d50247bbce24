//! The expression language of `rule` policies and `when` conditions, compiled once at load.
//!
//! ```text
//! job.gpus > 32 && job.stage == "eval"
//! job.gpu_type in ["H200", "H100"] && !job.ready.data
//! project.gpu_hours.month + job.gpu_hours > 5000
//! has(job.tags.team) && job.tags.team != "search"
//! ```
//!
//! Values are numbers, strings, booleans and (literal) lists. Operators: `||`, `&&`, `!`, `==`, `!=`,
//! `<`, `<=`, `>`, `>=`, `in`, `+`, `-`, `*`, `/`, parentheses. Names are resolved and type-checked when
//! the policy is loaded, so a typo or `job.gpus == "8"` is a load error with a column, never a silent
//! false at run time. A field the input does not carry (a job without `model_params_b`) is *missing*:
//! every comparison with a missing value is false, and `has(x)` asks whether it is present.
//!
//! Why not CEL: the brief asks for CEL or a small language chosen by measurement; see
//! `docs/policy-language.md#why-not-cel` for the numbers. In short, this tree-walking evaluator works on
//! borrowed values with no allocation and names resolved to enum variants at load time.

use std::fmt;
use std::ops::Range;

use bursar_engine::{JobRecord, ScopeKind, State};
use bursar_model::{Event, EventKind, JobSpec, Period, Timestamp};

/// A compile error inside an expression, with a byte range relative to the expression text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Where, in the expression.
    pub span: Range<usize>,
    /// What is wrong.
    pub message: String,
}

/// Static types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A number.
    Num,
    /// A string.
    Str,
    /// A boolean.
    Bool,
    /// A list literal.
    List,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ty::Num => "number",
            Ty::Str => "string",
            Ty::Bool => "boolean",
            Ty::List => "list",
        })
    }
}

/// A name the language knows, resolved at load.
#[derive(Debug, Clone, PartialEq)]
pub enum Name {
    /// `job.<field>`.
    Job(JobField),
    /// `job.tags.<key>`.
    JobTag(String),
    /// `event.<field>`.
    Event(EventField),
    /// `project.gpu_hours.<period>` / `user.gpu_hours.<period>`: usage by runtime, reserved included.
    Usage(ScopeKind, Period),
    /// `project.held_gpus` / `user.held_gpus`.
    Held(ScopeKind),
    /// `project.running_gpus` / `user.running_gpus`.
    Running(ScopeKind),
    /// `time.hour` (0-23, UTC).
    Hour,
    /// `time.weekday` (1 = Monday … 7 = Sunday, UTC).
    Weekday,
}

macro_rules! fields {
    ($enum:ident { $($variant:ident => $name:literal : $ty:ident),* $(,)? }) => {
        /// A field.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $enum { $(#[doc = $name] $variant),* }
        impl $enum {
            /// All names, for messages.
            pub const NAMES: &'static [&'static str] = &[$($name),*];
            fn parse(s: &str) -> Option<($enum, Ty)> {
                match s { $($name => Some(($enum::$variant, Ty::$ty)),)* _ => None }
            }
        }
    };
}

fields!(JobField {
    Id => "id": Str,
    Project => "project": Str,
    User => "user": Str,
    Queue => "queue": Str,
    Gpus => "gpus": Num,
    GpuType => "gpu_type": Str,
    GpuMemGb => "gpu_mem_gb": Num,
    Nodes => "nodes": Num,
    RequestedHours => "requested_hours": Num,
    GpuHours => "gpu_hours": Num,
    Stage => "stage": Str,
    ModelParamsB => "model_params_b": Num,
    Image => "image": Str,
    Dataset => "dataset": Str,
    ScriptHash => "script_hash": Str,
    ReadyImage => "ready.image": Bool,
    ReadyData => "ready.data": Bool,
    ReadyScript => "ready.script": Bool,
    Deferrable => "deferrable": Bool,
    MixedPrecision => "mixed_precision": Bool,
    BatchSize => "batch_size": Num,
    DataloaderWorkers => "dataloader_workers": Num,
    Interconnect => "interconnect": Str,
    Region => "region": Str,
    Config => "config": Str,
    Phase => "phase": Str,
    RuntimeHours => "runtime_hours": Num,
    GpuUtil => "gpu_util": Num,
    AvgGpuUtil => "avg_gpu_util": Num,
});

fields!(EventField {
    Type => "type": Str,
    Id => "id": Str,
    GpuUtil => "gpu_util": Num,
    MemUtil => "mem_util": Num,
    Status => "status": Str,
    By => "by": Str,
    Project => "project": Str,
    GpuHours => "gpu_hours": Num,
    Amount => "amount": Num,
});

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `in`
    In,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

/// A compiled expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A number literal.
    Num(f64),
    /// A string literal.
    Str(String),
    /// A boolean literal.
    Bool(bool),
    /// A list literal.
    List(Vec<Expr>),
    /// A name.
    Name(Name),
    /// `has(name)`.
    Has(Name),
    /// `!e`.
    Not(Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `a op b`.
    Bin(Op, Box<Expr>, Box<Expr>),
}

/// A value during evaluation; borrowed from the input or the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val<'a> {
    /// Not present in the input.
    Missing,
    /// A number.
    Num(f64),
    /// A string.
    Str(&'a str),
    /// A boolean.
    Bool(bool),
    /// A list literal.
    List(&'a [Expr]),
}

impl fmt::Display for Val<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Missing => f.write_str("(none)"),
            Val::Num(n) => {
                if n.fract() == 0.0 && n.abs() < 1e15 {
                    write!(f, "{}", *n as i64)
                } else {
                    write!(f, "{}", (n * 100.0).round() / 100.0)
                }
            }
            Val::Str(s) => f.write_str(s),
            Val::Bool(b) => write!(f, "{b}"),
            Val::List(_) => f.write_str("[…]"),
        }
    }
}

/// What an expression is evaluated against.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    /// The event.
    pub event: &'a Event,
    /// The submitted job, for `job.submitted`.
    pub spec: Option<&'a JobSpec>,
    /// The stored job, for later job events.
    pub job: Option<&'a JobRecord>,
    /// Engine state.
    pub state: &'a State,
    /// Event time.
    pub now: Timestamp,
}

// ---------------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    Sym(&'static str),
    End,
}

fn lex(src: &str) -> Result<Vec<(Tok, Range<usize>)>, ExprError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            let text = src[start..i].replace('_', "");
            let n = text
                .parse::<f64>()
                .map_err(|_| ExprError { span: start..i, message: format!("`{}` is not a number", &src[start..i]) })?;
            out.push((Tok::Num(n), start..i));
        } else if c == b'"' || c == b'\'' {
            i += 1;
            let mut s = String::new();
            loop {
                match b.get(i) {
                    None => return Err(ExprError { span: start..i, message: "unterminated string".into() }),
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if b.get(i + 1).is_some() => {
                        let next = src[i + 1..].chars().next().unwrap_or('\\');
                        s.push(match next {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                        i += 1 + next.len_utf8();
                    }
                    Some(_) => {
                        let ch = src[i..].chars().next().unwrap_or(' ');
                        s.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
            out.push((Tok::Str(s), start..i));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.' || b[i] == b'-') {
                i += 1;
            }
            out.push((Tok::Ident(src[start..i].to_owned()), start..i));
        } else {
            const SYMS: [&str; 17] =
                ["||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "(", ")", "[", "]"];
            let rest = &src[i..];
            if rest.starts_with(',') {
                out.push((Tok::Sym(","), i..i + 1));
                i += 1;
                continue;
            }
            match SYMS.iter().find(|s| rest.starts_with(**s)) {
                Some(s) => {
                    out.push((Tok::Sym(s), i..i + s.len()));
                    i += s.len();
                }
                None => {
                    let ch = rest.chars().next().unwrap_or(' ');
                    let hint = match ch {
                        '=' => " (use `==` to compare)",
                        '&' => " (use `&&`)",
                        '|' => " (use `||`)",
                        _ => "",
                    };
                    return Err(ExprError {
                        span: i..i + ch.len_utf8(),
                        message: format!("unexpected character `{ch}`{hint}"),
                    });
                }
            }
        }
    }
    out.push((Tok::End, src.len()..src.len()));
    Ok(out)
}

// ---------------------------------------------------------------------------------------------------
// Parser and type checker

struct Parser {
    toks: Vec<(Tok, Range<usize>)>,
    pos: usize,
}

type Typed = (Expr, Ty, Range<usize>);

/// Resolves a dotted name.
pub fn resolve(name: &str) -> Result<(Name, Ty), String> {
    if let Some(rest) = name.strip_prefix("job.") {
        if let Some(tag) = rest.strip_prefix("tags.") {
            if tag.is_empty() {
                return Err("`job.tags.` needs a tag name, e.g. `job.tags.team`".into());
            }
            return Ok((Name::JobTag(tag.to_owned()), Ty::Str));
        }
        return JobField::parse(rest).map(|(f, t)| (Name::Job(f), t)).ok_or_else(|| {
            let mut msg = format!("unknown field `{name}`; `job` has {}", crate::reader::one_of(JobField::NAMES));
            if let Some(m) = crate::reader::did_you_mean(rest, JobField::NAMES) {
                msg = format!("unknown field `{name}`: did you mean `job.{m}`?");
            }
            msg
        });
    }
    if let Some(rest) = name.strip_prefix("event.") {
        return EventField::parse(rest).map(|(f, t)| (Name::Event(f), t)).ok_or_else(|| {
            format!("unknown field `{name}`; `event` has {}", crate::reader::one_of(EventField::NAMES))
        });
    }
    for (prefix, kind) in [("project.", ScopeKind::Project), ("user.", ScopeKind::User)] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return match rest {
                "gpu_hours.day" => Ok((Name::Usage(kind, Period::Day), Ty::Num)),
                "gpu_hours.week" => Ok((Name::Usage(kind, Period::Week), Ty::Num)),
                "gpu_hours.month" => Ok((Name::Usage(kind, Period::Month), Ty::Num)),
                "held_gpus" => Ok((Name::Held(kind), Ty::Num)),
                "running_gpus" => Ok((Name::Running(kind), Ty::Num)),
                _ => Err(format!(
                    "unknown field `{name}`; `{}` has `gpu_hours.day`, `gpu_hours.week`, `gpu_hours.month`, `held_gpus` or `running_gpus`",
                    prefix.trim_end_matches('.')
                )),
            };
        }
    }
    match name {
        "time.hour" => Ok((Name::Hour, Ty::Num)),
        "time.weekday" => Ok((Name::Weekday, Ty::Num)),
        "true" | "false" => Err("unreachable".into()),
        _ => Err(format!("unknown name `{name}`; names start with `job.`, `event.`, `project.`, `user.` or `time.`")),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }
    fn span(&self) -> Range<usize> {
        self.toks[self.pos.min(self.toks.len() - 1)].1.clone()
    }
    fn bump(&mut self) -> (Tok, Range<usize>) {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        self.pos += 1;
        t
    }
    fn eat(&mut self, sym: &str) -> bool {
        if matches!(self.peek(), Tok::Sym(s) if *s == sym) || matches!(self.peek(), Tok::Ident(s) if s == sym) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn err<T>(&self, span: Range<usize>, message: impl Into<String>) -> Result<T, ExprError> {
        Err(ExprError { span, message: message.into() })
    }

    fn expect_ty(&self, e: &Typed, want: Ty, what: &str) -> Result<(), ExprError> {
        if e.1 == want { Ok(()) } else { self.err(e.2.clone(), format!("{what} needs a {want}, found a {}", e.1)) }
    }

    fn or(&mut self) -> Result<Typed, ExprError> {
        let mut l = self.and()?;
        while self.eat("||") {
            let r = self.and()?;
            self.expect_ty(&l, Ty::Bool, "`||`")?;
            self.expect_ty(&r, Ty::Bool, "`||`")?;
            let span = l.2.start..r.2.end;
            l = (Expr::Bin(Op::Or, Box::new(l.0), Box::new(r.0)), Ty::Bool, span);
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<Typed, ExprError> {
        let mut l = self.not()?;
        while self.eat("&&") {
            let r = self.not()?;
            self.expect_ty(&l, Ty::Bool, "`&&`")?;
            self.expect_ty(&r, Ty::Bool, "`&&`")?;
            let span = l.2.start..r.2.end;
            l = (Expr::Bin(Op::And, Box::new(l.0), Box::new(r.0)), Ty::Bool, span);
        }
        Ok(l)
    }

    fn not(&mut self) -> Result<Typed, ExprError> {
        let start = self.span();
        if self.eat("!") {
            let e = self.not()?;
            self.expect_ty(&e, Ty::Bool, "`!`")?;
            let span = start.start..e.2.end;
            return Ok((Expr::Not(Box::new(e.0)), Ty::Bool, span));
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Typed, ExprError> {
        let l = self.add()?;
        let op = match self.peek() {
            Tok::Sym("==") => Op::Eq,
            Tok::Sym("!=") => Op::Ne,
            Tok::Sym("<") => Op::Lt,
            Tok::Sym("<=") => Op::Le,
            Tok::Sym(">") => Op::Gt,
            Tok::Sym(">=") => Op::Ge,
            Tok::Ident(s) if s == "in" => Op::In,
            _ => return Ok(l),
        };
        self.bump();
        let r = self.add()?;
        let span = l.2.start..r.2.end;
        match op {
            Op::In => {
                if r.1 != Ty::List {
                    return self
                        .err(r.2, format!("`in` needs a list on its right, e.g. `[\"a\", \"b\"]`, found a {}", r.1));
                }
                if let Expr::List(items) = &r.0 {
                    for item in items {
                        let ty = match item {
                            Expr::Num(_) => Ty::Num,
                            Expr::Str(_) => Ty::Str,
                            Expr::Bool(_) => Ty::Bool,
                            _ => Ty::List,
                        };
                        if ty != l.1 {
                            return self.err(r.2, format!("the list holds a {ty} but `{}` is a {}", "left side", l.1));
                        }
                    }
                }
            }
            Op::Eq | Op::Ne => {
                if l.1 != r.1 {
                    return self.err(span, format!("cannot compare a {} with a {}", l.1, r.1));
                }
            }
            _ => {
                self.expect_ty(&l, Ty::Num, "ordering")?;
                self.expect_ty(&r, Ty::Num, "ordering")?;
            }
        }
        Ok((Expr::Bin(op, Box::new(l.0), Box::new(r.0)), Ty::Bool, span))
    }

    fn add(&mut self) -> Result<Typed, ExprError> {
        let mut l = self.mul()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("+") => Op::Add,
                Tok::Sym("-") => Op::Sub,
                _ => return Ok(l),
            };
            self.bump();
            let r = self.mul()?;
            self.expect_ty(&l, Ty::Num, "arithmetic")?;
            self.expect_ty(&r, Ty::Num, "arithmetic")?;
            let span = l.2.start..r.2.end;
            l = (Expr::Bin(op, Box::new(l.0), Box::new(r.0)), Ty::Num, span);
        }
    }

    fn mul(&mut self) -> Result<Typed, ExprError> {
        let mut l = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Sym("*") => Op::Mul,
                Tok::Sym("/") => Op::Div,
                _ => return Ok(l),
            };
            self.bump();
            let r = self.unary()?;
            self.expect_ty(&l, Ty::Num, "arithmetic")?;
            self.expect_ty(&r, Ty::Num, "arithmetic")?;
            let span = l.2.start..r.2.end;
            l = (Expr::Bin(op, Box::new(l.0), Box::new(r.0)), Ty::Num, span);
        }
    }

    fn unary(&mut self) -> Result<Typed, ExprError> {
        let start = self.span();
        if self.eat("-") {
            let e = self.unary()?;
            self.expect_ty(&e, Ty::Num, "`-`")?;
            let span = start.start..e.2.end;
            return Ok((Expr::Neg(Box::new(e.0)), Ty::Num, span));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Typed, ExprError> {
        let (tok, span) = self.bump();
        match tok {
            Tok::Num(n) => Ok((Expr::Num(n), Ty::Num, span)),
            Tok::Str(s) => Ok((Expr::Str(s), Ty::Str, span)),
            Tok::Sym("(") => {
                let e = self.or()?;
                if !self.eat(")") {
                    return self.err(self.span(), "expected `)`");
                }
                Ok(e)
            }
            Tok::Sym("[") => {
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        let e = self.add()?;
                        if !matches!(e.0, Expr::Num(_) | Expr::Str(_) | Expr::Bool(_)) {
                            return self.err(e.2, "list items must be literal numbers, strings or booleans");
                        }
                        items.push(e.0);
                        if self.eat("]") {
                            break;
                        }
                        if !self.eat(",") {
                            return self.err(self.span(), "expected `,` or `]` in the list");
                        }
                    }
                }
                let end = self.toks[self.pos.saturating_sub(1)].1.end;
                Ok((Expr::List(items), Ty::List, span.start..end))
            }
            Tok::Ident(name) => match name.as_str() {
                "true" => Ok((Expr::Bool(true), Ty::Bool, span)),
                "false" => Ok((Expr::Bool(false), Ty::Bool, span)),
                "has" => {
                    if !self.eat("(") {
                        return self.err(self.span(), "expected `(` after `has`");
                    }
                    let (arg, aspan) = self.bump();
                    let Tok::Ident(arg) = arg else {
                        return self.err(aspan, "`has` takes a name, e.g. `has(job.model_params_b)`");
                    };
                    let (n, _) = resolve(&arg).map_err(|m| ExprError { span: aspan.clone(), message: m })?;
                    if !self.eat(")") {
                        return self.err(self.span(), "expected `)`");
                    }
                    Ok((Expr::Has(n), Ty::Bool, span.start..aspan.end + 1))
                }
                _ => {
                    let (n, ty) = resolve(&name).map_err(|m| ExprError { span: span.clone(), message: m })?;
                    Ok((Expr::Name(n), ty, span))
                }
            },
            Tok::End => self.err(span, "the expression ends too early"),
            Tok::Sym(s) => self.err(span, format!("unexpected `{s}`")),
        }
    }
}

/// Compiles a boolean condition.
pub fn compile_condition(src: &str) -> Result<Expr, ExprError> {
    let (e, ty, span) = compile_any(src)?;
    if ty != Ty::Bool {
        return Err(ExprError { span, message: format!("a condition must be true or false, this is a {ty}") });
    }
    Ok(e)
}

/// Compiles any expression, returning its type.
pub fn compile_any(src: &str) -> Result<(Expr, Ty, Range<usize>), ExprError> {
    if src.trim().is_empty() {
        return Err(ExprError { span: 0..0, message: "the expression is empty".into() });
    }
    let mut p = Parser { toks: lex(src)?, pos: 0 };
    let e = p.or()?;
    if !matches!(p.peek(), Tok::End) {
        let span = p.span();
        return Err(ExprError { span, message: "unexpected text after the expression (missing `&&` or `||`?)".into() });
    }
    Ok(e)
}

// ---------------------------------------------------------------------------------------------------
// Evaluation

fn opt_str(s: Option<&str>) -> Val<'_> {
    s.map_or(Val::Missing, Val::Str)
}

fn opt_num(n: Option<f64>) -> Val<'static> {
    n.map_or(Val::Missing, Val::Num)
}

fn opt_bool(b: Option<bool>) -> Val<'static> {
    b.map_or(Val::Missing, Val::Bool)
}

impl Name {
    fn job<'a>(f: JobField, env: &Env<'a>) -> Val<'a> {
        use JobField as F;
        if let Some(j) = env.spec {
            return match f {
                F::Id => Val::Str(&j.id),
                F::Project => Val::Str(&j.project),
                F::User => Val::Str(&j.user),
                F::Queue => opt_str(j.queue.as_deref()),
                F::Gpus => Val::Num(j.gpus.as_f64()),
                F::GpuType => opt_str(j.gpu_type.as_deref()),
                F::GpuMemGb => opt_num(j.gpu_mem_gb),
                F::Nodes => Val::Num(f64::from(j.nodes)),
                F::RequestedHours => Val::Num(j.requested_hours),
                F::GpuHours => Val::Num(j.requested_gpu_hours()),
                F::Stage => opt_str(j.stage.as_deref()),
                F::ModelParamsB => opt_num(j.model_params_b),
                F::Image => opt_str(j.image.as_deref()),
                F::Dataset => opt_str(j.dataset.as_deref()),
                F::ScriptHash => opt_str(j.script_hash.as_deref()),
                F::ReadyImage => opt_bool(j.ready.image),
                F::ReadyData => opt_bool(j.ready.data),
                F::ReadyScript => opt_bool(j.ready.script),
                F::Deferrable => Val::Bool(j.deferrable),
                F::MixedPrecision => opt_bool(j.mixed_precision),
                F::BatchSize => opt_num(j.batch_size.map(f64::from)),
                F::DataloaderWorkers => opt_num(j.dataloader_workers.map(f64::from)),
                F::Interconnect => opt_str(j.interconnect.as_deref()),
                F::Region => opt_str(j.region.as_deref()),
                F::Config => opt_str(j.config.as_deref()),
                F::Phase => Val::Str("submitted"),
                F::RuntimeHours | F::GpuUtil | F::AvgGpuUtil => Val::Missing,
            };
        }
        let Some(j) = env.job else { return Val::Missing };
        match f {
            F::Id => env.event.kind.job_id().map_or(Val::Missing, Val::Str),
            F::Project => Val::Str(j.project()),
            F::User => Val::Str(j.user()),
            F::Queue => opt_str(j.queue()),
            F::Gpus => Val::Num(j.gpus().as_f64()),
            F::GpuType => opt_str(j.gpu_type()),
            F::Nodes => Val::Num(f64::from(j.nodes())),
            F::RequestedHours => Val::Num(j.requested_hours()),
            F::GpuHours => Val::Num(j.gpus().as_f64() * j.requested_hours()),
            F::Stage => opt_str(j.stage()),
            F::Deferrable => Val::Bool(j.deferrable()),
            F::Phase => Val::Str(j.phase().as_str()),
            F::RuntimeHours => {
                j.started().map_or(Val::Missing, |s| Val::Num(j.ended().unwrap_or(env.now).since(s).as_hours()))
            }
            F::GpuUtil => {
                if j.util().samples > 0 {
                    Val::Num(f64::from(j.util().gpu_util))
                } else {
                    Val::Missing
                }
            }
            F::AvgGpuUtil => {
                if j.util().samples > 0 {
                    Val::Num(f64::from(j.util().avg_gpu_util))
                } else {
                    Val::Missing
                }
            }
            _ => Val::Missing,
        }
    }

    fn eval<'a>(&'a self, env: &Env<'a>) -> Val<'a> {
        match self {
            Name::Job(f) => Name::job(*f, env),
            Name::JobTag(k) => {
                if let Some(j) = env.spec {
                    opt_str(j.tag(k))
                } else {
                    opt_str(env.job.and_then(|j| j.tag(k)))
                }
            }
            Name::Event(f) => {
                use EventField as F;
                let e = env.event;
                match (f, &e.kind) {
                    (F::Type, k) => Val::Str(k.type_name()),
                    (F::Id, _) => Val::Str(&e.id),
                    (F::GpuUtil, EventKind::JobSample(s)) => Val::Num(s.gpu_util),
                    (F::MemUtil, EventKind::JobSample(s)) => opt_num(s.mem_util),
                    (F::Status, EventKind::JobFinished { status, .. }) => Val::Str(status.as_str()),
                    (
                        F::By,
                        EventKind::JobKeepalive { by, .. }
                        | EventKind::ApprovalGranted { by, .. }
                        | EventKind::ApprovalRejected { by, .. },
                    ) => opt_str(by.as_deref()),
                    (F::Project, EventKind::BillingCharge(c)) => opt_str(c.project.as_deref()),
                    (F::Project, EventKind::AssetRegistered { project, .. }) => Val::Str(project),
                    (F::Project, EventKind::JobSubmitted(j)) => Val::Str(&j.project),
                    (F::GpuHours, EventKind::BillingCharge(c)) => Val::Num(c.gpu_hours),
                    (F::Amount, EventKind::BillingCharge(c)) => opt_num(c.amount),
                    _ => Val::Missing,
                }
            }
            Name::Usage(kind, period) => match scope_name(*kind, env) {
                Some(n) => Val::Num(env.state.usage(*kind, n, *period, env.now).by_runtime()),
                None => Val::Missing,
            },
            Name::Held(kind) => match scope_name(*kind, env) {
                Some(n) => Val::Num(env.state.ledger(*kind, n).map_or(0.0, |l| l.held_gpus.as_f64())),
                None => Val::Missing,
            },
            Name::Running(kind) => match scope_name(*kind, env) {
                Some(n) => Val::Num(env.state.ledger(*kind, n).map_or(0.0, |l| l.running_gpus.as_f64())),
                None => Val::Missing,
            },
            Name::Hour => Val::Num((env.now.time_of_day(bursar_model::Duration(0)) / 3_600_000) as f64),
            Name::Weekday => Val::Num(((env.now.day() + 3).rem_euclid(7) + 1) as f64),
        }
    }
}

fn scope_name<'a>(kind: ScopeKind, env: &Env<'a>) -> Option<&'a str> {
    match kind {
        ScopeKind::Project => env.spec.map(|j| j.project.as_str()).or_else(|| env.job.map(|j| j.project())),
        ScopeKind::User => env.spec.map(|j| j.user.as_str()).or_else(|| env.job.map(|j| j.user())),
        ScopeKind::Tag => None,
    }
}

fn lit(e: &Expr) -> Val<'_> {
    match e {
        Expr::Num(n) => Val::Num(*n),
        Expr::Str(s) => Val::Str(s),
        Expr::Bool(b) => Val::Bool(*b),
        _ => Val::Missing,
    }
}

impl Expr {
    /// Evaluates the expression.
    pub fn eval<'a>(&'a self, env: &Env<'a>) -> Val<'a> {
        match self {
            Expr::Num(n) => Val::Num(*n),
            Expr::Str(s) => Val::Str(s),
            Expr::Bool(b) => Val::Bool(*b),
            Expr::List(items) => Val::List(items),
            Expr::Name(n) => n.eval(env),
            Expr::Has(n) => Val::Bool(n.eval(env) != Val::Missing),
            Expr::Not(e) => match e.eval(env) {
                Val::Bool(b) => Val::Bool(!b),
                _ => Val::Bool(false),
            },
            Expr::Neg(e) => match e.eval(env) {
                Val::Num(n) => Val::Num(-n),
                _ => Val::Missing,
            },
            Expr::Bin(op, l, r) => {
                match op {
                    Op::And => return Val::Bool(l.truthy(env) && r.truthy(env)),
                    Op::Or => return Val::Bool(l.truthy(env) || r.truthy(env)),
                    _ => {}
                }
                let (a, b) = (l.eval(env), r.eval(env));
                match (op, a, b) {
                    (_, Val::Missing, _) | (_, _, Val::Missing) => match op {
                        Op::Add | Op::Sub | Op::Mul | Op::Div => Val::Missing,
                        _ => Val::Bool(false),
                    },
                    (Op::Eq, a, b) => Val::Bool(a == b),
                    (Op::Ne, a, b) => Val::Bool(a != b),
                    (Op::In, a, Val::List(items)) => Val::Bool(items.iter().any(|i| lit(i) == a)),
                    (Op::Lt, Val::Num(a), Val::Num(b)) => Val::Bool(a < b),
                    (Op::Le, Val::Num(a), Val::Num(b)) => Val::Bool(a <= b),
                    (Op::Gt, Val::Num(a), Val::Num(b)) => Val::Bool(a > b),
                    (Op::Ge, Val::Num(a), Val::Num(b)) => Val::Bool(a >= b),
                    (Op::Add, Val::Num(a), Val::Num(b)) => Val::Num(a + b),
                    (Op::Sub, Val::Num(a), Val::Num(b)) => Val::Num(a - b),
                    (Op::Mul, Val::Num(a), Val::Num(b)) => Val::Num(a * b),
                    (Op::Div, Val::Num(a), Val::Num(b)) => {
                        if b == 0.0 {
                            Val::Missing
                        } else {
                            Val::Num(a / b)
                        }
                    }
                    _ => Val::Missing,
                }
            }
        }
    }

    /// Evaluates a condition: true only for `true`.
    pub fn truthy(&self, env: &Env<'_>) -> bool {
        matches!(self.eval(env), Val::Bool(true))
    }
}

/// A reason with `{name}` placeholders, compiled at load.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Expr(Expr),
}

impl Template {
    /// Compiles `text`; `{{` and `}}` are literal braces.
    pub fn compile(text: &str) -> Result<Template, ExprError> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|(_, c)| *c) == Some('{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek().map(|(_, c)| *c) == Some('}') => {
                    chars.next();
                    lit.push('}');
                }
                '{' => {
                    let Some(end) = text[i..].find('}') else {
                        return Err(ExprError { span: i..text.len(), message: "`{` without a closing `}`".into() });
                    };
                    let inner = &text[i + 1..i + end];
                    let (e, _, _) = compile_any(inner).map_err(|mut err| {
                        err.span = err.span.start + i + 1..err.span.end + i + 1;
                        err
                    })?;
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Expr(e));
                    while chars.peek().is_some_and(|(j, _)| *j <= i + end) {
                        chars.next();
                    }
                }
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    /// Renders the template.
    pub fn render(&self, env: &Env<'_>) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => s.push_str(l),
                Part::Expr(e) => {
                    use fmt::Write;
                    let _ = write!(s, "{}", e.eval(env));
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::decode_event;

    fn env_eval(expr: &str, line: &str) -> Val<'static> {
        let event: &'static Event = Box::leak(Box::new(decode_event(line).unwrap()));
        let state: &'static State = Box::leak(Box::default());
        let spec = match &event.kind {
            EventKind::JobSubmitted(j) => Some(&**j),
            _ => None,
        };
        let e: &'static Expr = Box::leak(Box::new(compile_any(expr).unwrap().0));
        e.eval(&Env { event, spec, job: None, state, now: event.time })
    }

    const SUB: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"alice","gpus":8,"gpu_type":"H200","requested_hours":4,"stage":"eval","ready":{"image":true,"data":false},"tags":{"team":"search"}}}"#;

    #[test]
    fn evaluates() {
        assert_eq!(env_eval("job.gpus > 4 && job.stage == \"eval\"", SUB), Val::Bool(true));
        assert_eq!(env_eval("job.gpu_hours", SUB), Val::Num(32.0));
        assert_eq!(env_eval("job.gpu_type in [\"H200\", \"H100\"]", SUB), Val::Bool(true));
        assert_eq!(env_eval("!job.ready.data", SUB), Val::Bool(true));
        assert_eq!(env_eval("job.model_params_b > 1", SUB), Val::Bool(false));
        assert_eq!(env_eval("has(job.model_params_b)", SUB), Val::Bool(false));
        assert_eq!(env_eval("job.tags.team == 'search'", SUB), Val::Bool(true));
        assert_eq!(env_eval("time.hour", SUB), Val::Num(9.0));
        assert_eq!(env_eval("time.weekday", SUB), Val::Num(1.0));
        assert_eq!(env_eval("(job.gpus + 2) * 2 / 4", SUB), Val::Num(5.0));
        assert_eq!(env_eval("project.gpu_hours.month", SUB), Val::Num(0.0));
    }

    #[test]
    fn load_errors_have_columns() {
        let e = compile_condition("job.gpus > 4 && job.stge == \"x\"").unwrap_err();
        assert_eq!(e.span, 16..24);
        assert!(e.message.contains("did you mean `job.stage`"), "{}", e.message);
        let e = compile_condition("job.gpus == \"8\"").unwrap_err();
        assert!(e.message.contains("cannot compare a number with a string"));
        let e = compile_condition("job.gpus = 8").unwrap_err();
        assert!(e.message.contains("use `==`"));
        let e = compile_condition("job.gpus + 1").unwrap_err();
        assert!(e.message.contains("must be true or false"));
        assert!(compile_condition("job.gpus > 4 job.nodes > 1").is_err());
        assert!(compile_condition("").is_err());
    }

    #[test]
    fn templates() {
        let t = Template::compile("asked {job.gpus} GPUs ({job.gpu_hours} GPU-hours) {{literal}}").unwrap();
        let event = decode_event(SUB).unwrap();
        let state = State::default();
        let spec = match &event.kind {
            EventKind::JobSubmitted(j) => Some(&**j),
            _ => None,
        };
        let s = t.render(&Env { event: &event, spec, job: None, state: &state, now: event.time });
        assert_eq!(s, "asked 8 GPUs (32 GPU-hours) {literal}");
        let err = Template::compile("x {job.nope}").unwrap_err();
        assert_eq!(err.span, 3..11);
    }

    proptest::proptest! {
        #[test]
        fn compile_never_panics(s in ".{0,60}") {
            let _ = compile_any(&s);
            let _ = Template::compile(&s);
        }
    }
}
