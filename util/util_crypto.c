/*
 * util_crypto.c - the one place that calls OpenSSL: SHA-256, random ids,
 * and freeing a thread's OpenSSL state. Not for: what is hashed
 * (pipeline/fingerprint.c).
 */
#include "mf_util.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

void mf_thread_end(void)
{
	OPENSSL_thread_stop();
}

int mf_random_hex(size_t nbytes, char *out)
{
	uint8_t buf[64];
	if (nbytes > sizeof(buf))
		return -EINVAL;
	if (RAND_bytes(buf, (int)nbytes) != 1)
		return -EIO;
	mf_hex(buf, nbytes, out);
	return 0;
}

int mf_sha256_init(struct mf_sha256 *h)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -EIO;
	}
	h->ctx = ctx;
	return 0;
}

int mf_sha256_update(struct mf_sha256 *h, const void *data, size_t len)
{
	return EVP_DigestUpdate(h->ctx, data, len) == 1 ? 0 : -EIO;
}

int mf_sha256_final(struct mf_sha256 *h, uint8_t digest[32])
{
	unsigned int n = 0;
	int ok = EVP_DigestFinal_ex(h->ctx, digest, &n) == 1 && n == 32;
	mf_sha256_release(h);
	return ok ? 0 : -EIO;
}

void mf_sha256_release(struct mf_sha256 *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}
