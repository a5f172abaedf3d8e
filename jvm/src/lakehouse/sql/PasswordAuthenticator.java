package lakehouse.sql;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The SQL server's check of who connects (HiveServer2's CUSTOM authentication): the one
 * user named by the system property {@code lakehouse.sql.user}, with the password the
 * server's process holds in its environment, never on its command line or in a file.
 * System properties, because HiveServer2 makes this class from a configuration of its own
 * that reads them, not the server's.
 */
public final class PasswordAuthenticator implements PasswdAuthenticationProvider {
    static final String USER_PROPERTY = "lakehouse.sql.user";
    static final String PASSWORD_ENV = "LAKEHOUSE_SQL_PASSWORD";

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        String expectedUser = System.getProperty(USER_PROPERTY);
        String expectedPassword = System.getenv(PASSWORD_ENV);
        if (expectedUser == null || expectedUser.isEmpty()
                || expectedPassword == null || expectedPassword.isEmpty()) {
            throw new AuthenticationException("the server has no user and password to admit");
        }
        // Both compared in full, in constant time: how far a guess matches is not told.
        boolean userMatches = MessageDigest.isEqual(bytes(expectedUser), bytes(user));
        boolean passwordMatches = MessageDigest.isEqual(bytes(expectedPassword), bytes(password));
        if (!(userMatches && passwordMatches)) {
            throw new AuthenticationException("wrong user or password");
        }
    }

    private static byte[] bytes(String text) {
        return text == null ? new byte[0] : text.getBytes(StandardCharsets.UTF_8);
    }
}
