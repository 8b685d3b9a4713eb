// Command track sends a few messages to a hookrelay collector listening on
// this machine. Start the collector, then run: go run ./examples/track
package main

import (
	"log"
	"time"

	analytics "github.com/hookrelay/hookrelay/clients/go"
)

func main() {
	client := analytics.New("wk_live_123")
	client.Endpoint = "http://127.0.0.1:8080" // the default, shown for clarity
	client.Interval = time.Second
	client.Verbose = true

	// Each call validates and queues; uploads happen in the background.
	err := client.Identify(&analytics.Identify{
		UserId: "019mr8mf4r",
		Traits: map[string]interface{}{"name": "Michael Bolton", "plan": "Enterprise"},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = client.Track(&analytics.Track{
		UserId: "019mr8mf4r",
		Event:  "Order Completed",
		Properties: map[string]interface{}{
			"order_id": "50314b8e9bcf000000000000",
			"revenue":  39.95,
			"currency": "USD",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = client.Page(&analytics.Page{
		UserId: "019mr8mf4r",
		Name:   "Pricing",
		Traits: map[string]interface{}{"url": "https://example.com/pricing", "path": "/pricing"},
	})
	if err != nil {
		log.Fatal(err)
	}

	// Close sends what is still queued and waits for the collector.
	if err := client.Close(); err != nil {
		log.Fatal(err)
	}
}
