//! EC2's XML answers as a tree of [`Element`]s, enough to walk
//! `reservationSet/item/instancesSet/item/...` and `Errors/Error/Code`. The parsing is
//! `roxmltree`'s (well-formedness, entities, CDATA, namespaces); this module keeps only what the
//! plugin reads: each element's local name (EC2's `xmlns` and any prefix dropped), its text and
//! its child elements. Attributes are left out (EC2 puts data in elements only); a document
//! type declaration, or anything malformed, is an error, never a panic.

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
    let document = roxmltree::Document::parse(xml).map_err(|err| err.to_string())?;
    element(document.root_element(), 1)
}

/// `node` (an element at `depth`) and the elements below it.
fn element(node: roxmltree::Node<'_, '_>, depth: usize) -> Result<Element, String> {
    if depth > MAX_DEPTH {
        return Err("elements nested too deep".into());
    }
    let mut out = Element {
        name: node.tag_name().name().to_owned(),
        ..Element::default()
    };
    for child in node.children() {
        match child.node_type() {
            roxmltree::NodeType::Element => out.children.push(element(child, depth + 1)?),
            roxmltree::NodeType::Text => out.text.push_str(child.text().unwrap_or_default()),
            _ => {}
        }
    }
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

    fn fixture(name: &str) -> Element {
        let text = match name {
            "run_instances" => include_str!("../tests/fixtures/run_instances.xml"),
            "describe_instances" => include_str!("../tests/fixtures/describe_instances.xml"),
            "terminate_instances" => include_str!("../tests/fixtures/terminate_instances.xml"),
            "error" => include_str!("../tests/fixtures/error.xml"),
            other => panic!("no fixture {other}"),
        };
        parse(text).unwrap_or_else(|err| panic!("{name}: {err}"))
    }

    #[test]
    fn reads_run_instances_as_aws_documents_it() {
        let doc = fixture("run_instances");
        assert_eq!(doc.name, "RunInstancesResponse");
        assert_eq!(doc.text_at(&["reservationId"]), Some("r-1234567890abcdef0"));
        // An empty element is there, without text.
        assert!(doc.child("groupSet").is_some());
        assert_eq!(doc.text_at(&["groupSet"]), None);
        let items: Vec<_> = doc.child("instancesSet").unwrap().all("item").collect();
        assert_eq!(items.len(), 1);
        let instance = items[0];
        assert_eq!(
            instance.text_at(&["instanceId"]),
            Some("i-1234567890abcdef0")
        );
        assert_eq!(
            instance.text_at(&["instanceState", "name"]),
            Some("pending")
        );
        assert_eq!(instance.text_at(&["instanceState", "code"]), Some("0"));
        // Its own address, not the one of the interface nested below it.
        assert_eq!(
            instance.text_at(&["privateIpAddress"]),
            Some("192.168.1.88")
        );
        assert_eq!(
            instance.text_at(&["networkInterfaceSet", "item", "privateIpAddress"]),
            Some("192.168.1.89")
        );
        let tags: Vec<(&str, &str)> = instance
            .child("tagSet")
            .unwrap()
            .all("item")
            .map(|tag| {
                (
                    tag.text_at(&["key"]).unwrap(),
                    tag.text_at(&["value"]).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            tags,
            [
                ("Name", "MyInstance"),
                ("bulkhead-key", "web-1"),
                ("bulkhead-managed", "true"),
                ("bulkhead-port", "3000")
            ]
        );
    }

    #[test]
    fn reads_describe_instances_as_aws_documents_it() {
        let doc = fixture("describe_instances");
        assert_eq!(doc.name, "DescribeInstancesResponse");
        assert_eq!(
            doc.text_at(&["requestId"]),
            Some("8f7724cf-496f-496e-8fe3-example")
        );
        assert_eq!(doc.text_at(&["nextToken"]), None);
        let instances: Vec<&Element> = doc
            .child("reservationSet")
            .unwrap()
            .all("item")
            .flat_map(|reservation| reservation.child("instancesSet").unwrap().all("item"))
            .collect();
        let ids: Vec<_> = instances
            .iter()
            .map(|item| item.text_at(&["instanceId"]).unwrap())
            .collect();
        assert_eq!(ids, ["i-1234567890abcdef0", "i-0598c7d356eba48d7"]);
        assert_eq!(
            instances[0].text_at(&["launchTime"]),
            Some("2018-05-08T16:46:19.000Z")
        );
        let artifact = instances[0]
            .child("tagSet")
            .unwrap()
            .all("item")
            .find(|tag| tag.text_at(&["key"]) == Some("bulkhead-artifact"))
            .unwrap();
        assert_eq!(artifact.child("value").unwrap().text, "shop/web:1 & more");
        assert_eq!(
            instances[1].text_at(&["instanceState", "name"]),
            Some("stopped")
        );
        assert_eq!(
            instances[1].text_at(&["stateReason", "code"]),
            Some("Client.UserInitiatedShutdown")
        );
    }

    #[test]
    fn reads_terminate_instances_as_aws_documents_it() {
        let doc = fixture("terminate_instances");
        let item = doc.at(&["instancesSet", "item"]).unwrap();
        assert_eq!(item.text_at(&["instanceId"]), Some("i-1234567890abcdef0"));
        assert_eq!(
            item.text_at(&["currentState", "name"]),
            Some("shutting-down")
        );
        assert_eq!(item.text_at(&["previousState", "name"]), Some("running"));
    }

    #[test]
    fn reads_the_error_body_as_aws_documents_it() {
        let doc = fixture("error");
        assert_eq!(doc.name, "Response");
        let error = doc.at(&["Errors", "Error"]).unwrap();
        assert_eq!(error.text_at(&["Code"]), Some("InvalidInstanceID.NotFound"));
        assert_eq!(
            error.text_at(&["Message"]),
            Some("The instance ID 'i-1a2b3c4d' does not exist")
        );
        assert_eq!(doc.find("Code").unwrap().text, "InvalidInstanceID.NotFound");
        assert_eq!(
            doc.text_at(&["RequestID"]),
            Some("ea966190-f9aa-478e-9ede-example")
        );
    }

    #[test]
    fn prefixes_and_cdata_read_as_plain_elements_and_text() {
        let doc = parse(
            "<ec2:Response xmlns:ec2=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\n  <ec2:Code><![CDATA[a <b>]]></ec2:Code>\n  <!-- a comment -->\n</ec2:Response>",
        )
        .unwrap();
        assert_eq!(doc.name, "Response");
        assert_eq!(doc.text_at(&["Code"]), Some("a <b>"));
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
            // No document types: their entities are a way to make a small answer large.
            "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let deep = "<a>".repeat(100) + &"</a>".repeat(100);
        assert!(parse(&deep).is_err());
    }
}
