//! A minimal XML reader for EC2's responses: elements, their text and their children, enough
//! to walk `reservationSet/item/instancesSet/item/...` and `Errors/Error/Code`. Attributes
//! are skipped (EC2 puts data in elements only), namespace prefixes dropped, the predefined
//! and numeric entities and CDATA decoded; anything malformed is an error, never a panic.

/// An element: its local name, its text (concatenated) and its child elements in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    /// The children named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |child| child.name == name)
    }

    /// The element at `path` (child names) below this one.
    pub fn at(&self, path: &[&str]) -> Option<&Element> {
        path.iter()
            .try_fold(self, |element, name| element.child(name))
    }

    /// The trimmed text of the element at `path`, if it is there and not empty.
    pub fn text_at(&self, path: &[&str]) -> Option<&str> {
        self.at(path)
            .map(|element| element.text.trim())
            .filter(|text| !text.is_empty())
    }

    /// The first element named `name` anywhere below this one (depth first).
    pub fn find(&self, name: &str) -> Option<&Element> {
        self.children.iter().find_map(|child| {
            (child.name == name)
                .then_some(child)
                .or_else(|| child.find(name))
        })
    }
}

/// Deeper than this is not an EC2 response.
const MAX_DEPTH: usize = 64;

/// Parses a document into its root element.
pub fn parse(xml: &str) -> Result<Element, String> {
    let mut stack: Vec<Element> = Vec::new();
    let mut rest = xml;
    loop {
        let Some(open) = rest.find('<') else {
            if stack.is_empty() {
                return Err("no root element".into());
            }
            return Err(format!(
                "unclosed element <{}>",
                stack[stack.len() - 1].name
            ));
        };
        let (text, after) = rest.split_at(open);
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&unescape(text)?);
        } else if !text.trim().is_empty() {
            return Err("text outside the root element".into());
        }
        rest = after;
        if let Some(after) = rest.strip_prefix("<?") {
            rest = skip_past(after, "?>")?;
        } else if let Some(after) = rest.strip_prefix("<!--") {
            rest = skip_past(after, "-->")?;
        } else if let Some(after) = rest.strip_prefix("<![CDATA[") {
            let end = after.find("]]>").ok_or("unterminated CDATA")?;
            let top = stack.last_mut().ok_or("CDATA outside the root element")?;
            top.text.push_str(&after[..end]);
            rest = &after[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<!") {
            rest = skip_past(after, ">")?;
        } else if let Some(after) = rest.strip_prefix("</") {
            let end = after.find('>').ok_or("unterminated end tag")?;
            let name = local_name(after[..end].trim());
            let element = stack.pop().ok_or_else(|| format!("unexpected </{name}>"))?;
            if element.name != name {
                return Err(format!("</{name}> closes <{}>", element.name));
            }
            rest = &after[end + 1..];
            match stack.last_mut() {
                Some(parent) => parent.children.push(element),
                None => {
                    return if rest.trim().is_empty() || rest.trim_start().starts_with("<!--") {
                        Ok(element)
                    } else {
                        Err("content after the root element".into())
                    };
                }
            }
        } else {
            let after = &rest[1..];
            let end = tag_end(after).ok_or("unterminated start tag")?;
            let tag = &after[..end];
            let (tag, empty) = match tag.strip_suffix('/') {
                Some(tag) => (tag, true),
                None => (tag, false),
            };
            let name = tag
                .split(|c: char| c.is_whitespace())
                .next()
                .unwrap_or_default();
            if name.is_empty() {
                return Err("an element without a name".into());
            }
            let element = Element {
                name: local_name(name).to_owned(),
                ..Element::default()
            };
            rest = &after[end + 1..];
            if empty {
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => return Ok(element),
                }
            } else {
                if stack.len() >= MAX_DEPTH {
                    return Err("elements nested too deep".into());
                }
                stack.push(element);
            }
        }
    }
}

/// `prefix:name` → `name`.
fn local_name(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or(name)
}

fn skip_past<'a>(text: &'a str, end: &str) -> Result<&'a str, String> {
    text.find(end)
        .map(|at| &text[at + end.len()..])
        .ok_or_else(|| format!("missing `{end}`"))
}

/// Where a start tag's `>` is, quotes in attribute values respected.
fn tag_end(text: &str) -> Option<usize> {
    let mut quote = None;
    for (at, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(at),
            _ => {}
        }
    }
    None
}

fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let end = after.find(';').ok_or("an unterminated entity")?;
        let entity = &after[..end];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(decimal) = entity.strip_prefix('#') {
                    decimal.parse().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| format!("unknown entity &{entity};"))?
            }
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_ec2_response() {
        let doc = parse(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\n  <requestId>r1</requestId>\n  <reservationSet>\n    <item><instancesSet><item><instanceId>i-1</instanceId><tagSet><item><key>a&amp;b</key><value>&lt;v&#x41;&#66;&gt;</value></item></tagSet><groupSet/></item></instancesSet></item>\n  </reservationSet>\n</DescribeInstancesResponse>\n",
        )
        .unwrap();
        assert_eq!(doc.name, "DescribeInstancesResponse");
        assert_eq!(doc.text_at(&["requestId"]), Some("r1"));
        let instance = doc
            .at(&["reservationSet", "item", "instancesSet", "item"])
            .unwrap();
        assert_eq!(instance.text_at(&["instanceId"]), Some("i-1"));
        let tag = instance.at(&["tagSet", "item"]).unwrap();
        assert_eq!(tag.text_at(&["key"]), Some("a&b"));
        assert_eq!(tag.text_at(&["value"]), Some("<vAB>"));
        assert!(instance.child("groupSet").is_some());
        assert_eq!(doc.find("instanceId").unwrap().text, "i-1");
    }

    #[test]
    fn refuses_malformed_documents() {
        for bad in [
            "",
            "not xml",
            "<a><b></a>",
            "<a>",
            "<a></a><b/>",
            "<a>&bogus;</a>",
            "<a x=\"1></a>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let deep = "<a>".repeat(100) + &"</a>".repeat(100);
        assert!(parse(&deep).is_err());
    }
}
