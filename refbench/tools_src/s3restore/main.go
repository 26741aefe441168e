// s3restore undoes the deletions under a prefix of a versioned bucket: it removes the delete
// markers that hide the latest versions, in batches (one listing and one DeleteObjects request
// per 1000 objects), so a benchmark's "remove" step can get its objects back before every run
// at about the cost of the remove itself, instead of one CopyObject request per object.
// Nothing to restore (the objects are all there) is not an error: a prepare must be idempotent.
//
//	s3restore s3://bucket/prefix/
//
// Credentials, as the AWS tools find them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN (temporary credentials), else the profile AWS_PROFILE (default "default") of
// the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials). No
// instance-metadata lookup: nothing may leave for a network address the run did not name.
// Endpoint and region: S3_ENDPOINT_URL, AWS_REGION (else AWS_DEFAULT_REGION).
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "s3restore: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 || !strings.HasPrefix(os.Args[1], "s3://") {
		fail("usage: s3restore s3://bucket/prefix/")
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(os.Args[1], "s3://"), "/")
	if bucket == "" || prefix == "" {
		fail("refusing to work on a whole bucket: give s3://bucket/prefix/")
	}
	endpoint := os.Getenv("S3_ENDPOINT_URL")
	if endpoint == "" {
		endpoint = "https://s3.amazonaws.com"
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		fail("bad S3_ENDPOINT_URL %q", endpoint)
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds: credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},             // keys and the session token
			&credentials.FileAWSCredentials{}, // AWS_PROFILE in AWS_SHARED_CREDENTIALS_FILE
		}),
		Secure: u.Scheme == "https",
		Region: region,
	})
	if err != nil {
		fail("%v", err)
	}
	ctx := context.Background()
	markers := make(chan minio.ObjectInfo, 1000)
	var listErr error
	go func() {
		defer close(markers)
		for obj := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{
			Prefix: prefix, Recursive: true, WithVersions: true,
		}) {
			if obj.Err != nil {
				listErr = obj.Err
				return
			}
			if obj.IsDeleteMarker && obj.IsLatest {
				markers <- obj
			}
		}
	}()
	for res := range client.RemoveObjectsWithResult(ctx, bucket, markers, minio.RemoveObjectsOptions{}) {
		if res.Err != nil {
			fail("removing the delete marker of %s: %v", res.ObjectName, res.Err)
		}
	}
	if listErr != nil {
		fail("listing %s: %v", os.Args[1], listErr)
	}
}
