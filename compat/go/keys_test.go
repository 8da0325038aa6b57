package compat_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/keys"
)

// The official SDK with a ctxproxy key as its API key (or as its auth token,
// sent as Authorization: Bearer) works unchanged; upstream gets the tenant's
// own key and never the ctxproxy key.
func TestTheSDKWithACtxproxyKey(t *testing.T) {
	e := start(t)
	_, secret, err := e.keys.Create(context.Background(), keys.Spec{Tenant: "vault", Name: "sdk", User: "go"})
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]anthropic.Client{
		"as the API key":   e.client(secret),
		"as an auth token": anthropic.NewClient(option.WithBaseURL(e.proxyURL), option.WithAuthToken(secret)),
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e.fake.Enqueue(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("hello, vault")}})
			msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: model, MaxTokens: 100,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			if err != nil || msg.Content[0].Text != "hello, vault" {
				t.Fatalf("messages: %v", err)
			}
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: model, MaxTokens: 100,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			for stream.Next() {
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if _, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: model,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}); err != nil {
				t.Fatalf("count_tokens: %v", err)
			}
			if _, err := client.Models.List(ctx, anthropic.ModelListParams{}); err != nil {
				t.Fatalf("models: %v", err)
			}
			for _, r := range e.fake.Requests() {
				if strings.Contains(r.Path, "/v1/") && !strings.HasPrefix(r.Credential, "sk-ant-compat-go-") {
					t.Fatalf("%s went upstream with credential %q", r.Path, r.Credential)
				}
				for k, vv := range r.Header {
					if strings.Contains(strings.Join(vv, " "), keys.Prefix) {
						t.Fatalf("the ctxproxy key went upstream in %s", k)
					}
				}
			}
			if r, _ := e.fake.LastRequest("/v1/models"); r.Credential != vaultKey {
				t.Fatalf("models upstream credential %q", r.Credential)
			}
		})
	}
	t.Run("a revoked key is the SDK's AuthenticationError", func(t *testing.T) {
		k, secret, _ := e.keys.Create(context.Background(), keys.Spec{Tenant: "vault", Name: "gone"})
		if _, err := e.keys.Revoke(context.Background(), k.ID); err != nil {
			t.Fatal(err)
		}
		client := e.client(secret)
		_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: model, MaxTokens: 10,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}, option.WithMaxRetries(0))
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || string(apiErr.Type()) != "authentication_error" ||
			!strings.Contains(apiErr.Message, "revoked") {
			t.Fatalf("error %v", err)
		}
	})
}
