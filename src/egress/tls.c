/* SPDX-License-Identifier: Apache-2.0 */
/* TLS for brokered hosts: a per-run CA made in memory (its key never
 * leaves this process), leaf certificates minted per host, and the client
 * context that re-originates TLS to the real upstream with full
 * verification. Everything that reads a file (the system trust store) or
 * loads an OpenSSL provider happens in eg_tls_new, before the seccomp
 * filter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "eg.h"

struct leaf {
    char *host;
    SSL_CTX *ctx;
};

struct eg_tls {
    const struct eg_config *cfg;
    EVP_PKEY *ca_key;
    X509 *ca_cert;
    EVP_PKEY *leaf_key; /* one key for every leaf of the run */
    SSL_CTX *client_ctx;
    struct leaf *leaves;
    size_t n_leaves, cap_leaves;
};

static void ssl_err(char *err, size_t errlen, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(err, errlen, "%s: %s", what, e ? buf : "failed");
    ERR_clear_error();
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext)
        return -1;
    int r = X509_add_ext(cert, ext, -1) == 1 ? 0 : -1;
    X509_EXTENSION_free(ext);
    return r;
}

static int random_serial(X509 *cert)
{
    unsigned char b[16];
    if (RAND_bytes(b, sizeof(b)) != 1)
        return -1;
    b[0] &= 0x7f; /* positive */
    BIGNUM *bn = BN_bin2bn(b, sizeof(b), NULL);
    if (!bn)
        return -1;
    int r = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) ? 0 : -1;
    BN_free(bn);
    return r;
}

/* notBefore a few minutes back (clock skew inside the sandbox), notAfter
 * the run's validity from now. */
static int set_validity(X509 *cert, uint64_t seconds)
{
    if (!X509_gmtime_adj(X509_getm_notBefore(cert), -300))
        return -1;
    if (!X509_gmtime_adj(X509_getm_notAfter(cert), (long)seconds))
        return -1;
    return 0;
}

static int make_ca(struct eg_tls *t, char *err, size_t errlen)
{
    const struct eg_config *cfg = t->cfg;
    X509 *cert = NULL;
    char cn[128];

    t->ca_key = EVP_EC_gen("P-256");
    t->leaf_key = EVP_EC_gen("P-256");
    if (!t->ca_key || !t->leaf_key) {
        ssl_err(err, errlen, "generate the run CA key");
        return -1;
    }
    cert = X509_new();
    if (!cert)
        goto fail;
    if (X509_set_version(cert, 2) != 1 || random_serial(cert) < 0 ||
        set_validity(cert, cfg->ca_validity_seconds) < 0)
        goto fail;
    snprintf(cn, sizeof(cn), "agentjail run %.64s egress CA", cfg->run_id ? cfg->run_id : "");
    X509_NAME *name = X509_get_subject_name(cert);
    if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"agentjail", -1,
                                   -1, 0) != 1 ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                   0) != 1 ||
        X509_set_issuer_name(cert, name) != 1 || X509_set_pubkey(cert, t->ca_key) != 1)
        goto fail;
    /* Name constraints: the CA can vouch for the brokered hosts and
     * nothing else. A constraint only binds names of its own type, so
     * every IP address is excluded explicitly (else a leaf with an IP SAN
     * would pass). "*.example.org" becomes ".example.org": subdomains. */
    size_t cap = 256;
    for (size_t i = 0; i < cfg->n_secrets; i++)
        for (size_t j = 0; j < cfg->secrets[i].n_hosts; j++)
            cap += strlen(cfg->secrets[i].hosts[j]) + 24;
    char *nc = malloc(cap);
    if (!nc)
        goto fail;
    size_t off = (size_t)snprintf(nc, cap, "critical");
    for (size_t i = 0; i < cfg->n_secrets; i++)
        for (size_t j = 0; j < cfg->secrets[i].n_hosts; j++) {
            const char *h = cfg->secrets[i].hosts[j];
            bool wild = strncmp(h, "*.", 2) == 0;
            off += (size_t)snprintf(nc + off, cap - off, ",permitted;DNS:%s%s", wild ? "." : "",
                                    wild ? h + 2 : h);
        }
    snprintf(nc + off, cap - off, ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:::/::");
    int r = add_ext(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") |
            add_ext(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign") |
            add_ext(cert, cert, NID_subject_key_identifier, "hash") |
            add_ext(cert, cert, NID_name_constraints, nc);
    free(nc);
    if (r != 0 || X509_sign(cert, t->ca_key, EVP_sha256()) <= 0)
        goto fail;
    t->ca_cert = cert;
    return 0;
fail:
    ssl_err(err, errlen, "make the run CA certificate");
    X509_free(cert);
    return -1;
}

static int make_client_ctx(struct eg_tls *t, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        ssl_err(err, errlen, "SSL_CTX_new");
        return -1;
    }
    t->client_ctx = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* OpenSSL 3 reports a close without close_notify as an error, which
     * libevent 2.1 (older than OpenSSL 3) cannot tell from a real one:
     * read it as the end of the stream, as HTTP clients do. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* The system trust store, loaded now as one file (the hashed
     * directory would be read lazily, after the seccomp filter). */
    const char *file = getenv(X509_get_default_cert_file_env());
    if (!file)
        file = X509_get_default_cert_file();
    if (SSL_CTX_load_verify_file(ctx, file) != 1) {
        /* No system bundle (a minimal host): only upstream_ca_pem, if any. */
        ERR_clear_error();
        if (!t->cfg->upstream_ca_pem) {
            snprintf(err, errlen, "load the system trust store %s: no certificates", file);
            return -1;
        }
    }
    if (t->cfg->upstream_ca_pem) {
        BIO *bio = BIO_new_mem_buf(t->cfg->upstream_ca_pem, -1);
        X509_STORE *store = SSL_CTX_get_cert_store(ctx);
        X509 *c;
        int n = 0;
        while (bio && (c = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
            X509_STORE_add_cert(store, c);
            X509_free(c);
            n++;
        }
        BIO_free(bio);
        ERR_clear_error();
        if (n == 0) {
            snprintf(err, errlen, "upstream_ca_pem holds no PEM certificate");
            return -1;
        }
    }
    return 0;
}

struct eg_tls *eg_tls_new(const struct eg_config *cfg, char *err, size_t errlen)
{
    struct eg_tls *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->cfg = cfg;
    if (cfg->n_secrets > 0 && (make_ca(t, err, errlen) < 0 || make_client_ctx(t, err, errlen) < 0)) {
        eg_tls_free(t);
        return NULL;
    }
    return t;
}

void eg_tls_free(struct eg_tls *t)
{
    if (!t)
        return;
    EVP_PKEY_free(t->ca_key);
    EVP_PKEY_free(t->leaf_key);
    X509_free(t->ca_cert);
    SSL_CTX_free(t->client_ctx);
    for (size_t i = 0; i < t->n_leaves; i++) {
        free(t->leaves[i].host);
        SSL_CTX_free(t->leaves[i].ctx);
    }
    free(t->leaves);
    free(t);
}

char *eg_tls_ca_pem(struct eg_tls *t)
{
    if (!t || !t->ca_cert)
        return NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    char *data, *out = NULL;
    if (bio && PEM_write_bio_X509(bio, t->ca_cert) == 1) {
        long n = BIO_get_mem_data(bio, &data);
        out = malloc((size_t)n + 1);
        if (out) {
            memcpy(out, data, (size_t)n);
            out[n] = '\0';
        }
    }
    BIO_free(bio);
    return out;
}

static SSL_CTX *mint_leaf(struct eg_tls *t, const char *host)
{
    X509 *cert = X509_new();
    SSL_CTX *ctx = NULL;
    char san[300];

    if (!cert || X509_set_version(cert, 2) != 1 || random_serial(cert) < 0 ||
        set_validity(cert, t->cfg->ca_validity_seconds) < 0)
        goto out;
    X509_NAME *name = X509_get_subject_name(cert);
    if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)host, -1, -1,
                                   0) != 1 ||
        X509_set_issuer_name(cert, X509_get_subject_name(t->ca_cert)) != 1 ||
        X509_set_pubkey(cert, t->leaf_key) != 1)
        goto out;
    snprintf(san, sizeof(san), "DNS:%s", host);
    if ((add_ext(cert, t->ca_cert, NID_subject_alt_name, san) |
         add_ext(cert, t->ca_cert, NID_basic_constraints, "critical,CA:FALSE") |
         add_ext(cert, t->ca_cert, NID_key_usage, "critical,digitalSignature") |
         add_ext(cert, t->ca_cert, NID_ext_key_usage, "serverAuth") |
         add_ext(cert, t->ca_cert, NID_authority_key_identifier, "keyid:always")) != 0)
        goto out;
    if (X509_sign(cert, t->ca_key, EVP_sha256()) <= 0)
        goto out;
    ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        goto out;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, t->leaf_key) != 1 ||
        SSL_CTX_add1_chain_cert(ctx, t->ca_cert) != 1) {
        SSL_CTX_free(ctx);
        ctx = NULL;
    }
out:
    X509_free(cert);
    ERR_clear_error();
    return ctx;
}

SSL *eg_tls_server_ssl(struct eg_tls *t, const char *host)
{
    if (!t || !t->ca_cert)
        return NULL;
    for (size_t i = 0; i < t->n_leaves; i++)
        if (strcmp(t->leaves[i].host, host) == 0)
            return SSL_new(t->leaves[i].ctx);
    /* Bounded: the hosts a run may reach are the brokered hosts, each
     * minted once (a wildcard entry could mint many: cap it). */
    if (t->n_leaves >= 1024)
        return NULL;
    if (t->n_leaves == t->cap_leaves) {
        size_t nc = t->cap_leaves ? t->cap_leaves * 2 : 8;
        struct leaf *nl = realloc(t->leaves, nc * sizeof(*nl));
        if (!nl)
            return NULL;
        t->leaves = nl;
        t->cap_leaves = nc;
    }
    SSL_CTX *ctx = mint_leaf(t, host);
    char *h = strdup(host);
    if (!ctx || !h) {
        SSL_CTX_free(ctx);
        free(h);
        return NULL;
    }
    t->leaves[t->n_leaves++] = (struct leaf){h, ctx};
    return SSL_new(ctx);
}

SSL *eg_tls_client_ssl(struct eg_tls *t, const char *host)
{
    if (!t || !t->client_ctx)
        return NULL;
    SSL *ssl = SSL_new(t->client_ctx);
    if (!ssl)
        return NULL;
    if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}
