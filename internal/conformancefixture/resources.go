package conformancefixture

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// templatePrefix and templateSuffix frame the id of the template
// test://template/{id}/data.
const (
	templatePrefix = "test://template/"
	templateSuffix = "/data"
)

func addResources(s *mcp.Server) {
	static := func(uri, name, desc, mime string, contents *mcp.ResourceContents) {
		s.AddResource(&mcp.Resource{URI: uri, Name: name, Description: desc, MIMEType: mime},
			func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents}}, nil
			})
	}
	static("test://static-text", "static-text", "A static text resource", "text/plain", &mcp.ResourceContents{
		URI: "test://static-text", MIMEType: "text/plain", Text: "This is the content of the static text resource.",
	})
	static("test://static-binary", "static-binary", "A static binary resource (a 1x1 PNG)", "image/png", &mcp.ResourceContents{
		URI: "test://static-binary", MIMEType: "image/png", Blob: pngPixel,
	})
	static("test://watched-resource", "watched-resource", "A resource to subscribe to", "text/plain", &mcp.ResourceContents{
		URI: "test://watched-resource", MIMEType: "text/plain", Text: "Watched resource content.",
	})
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: templatePrefix + "{id}" + templateSuffix, Name: "template-data",
		Description: "Data for an id, substituted into the answer", MIMEType: "application/json",
	}, readTemplate)
}

// readTemplate answers test://template/{id}/data with a JSON document that
// names the id.
func readTemplate(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, templatePrefix)
	if ok {
		id, ok = strings.CutSuffix(id, templateSuffix)
	}
	if !ok || id == "" || strings.Contains(id, "/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	body, err := json.Marshal(map[string]any{"id": id, "templateTest": true, "data": "Data for ID: " + id})
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(body)}}}, nil
}
